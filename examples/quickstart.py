"""leaseq in 25 lines, on the SQLite default: enqueue, dequeue, ack."""

import leaseq

q = leaseq.connect("sqlite:///quickstart.db")
q.migrate()  # creates the tables; safe to run every time

q.enqueue("emails", {"to": "ada@example.com"}, priority=5)
q.enqueue("emails", {"to": "bob@example.com"}, delay=60)  # due in a minute
r = q.enqueue("emails", {"to": "ada@example.com"}, unique_key="welcome-ada")
print("enqueued", r.id, "created" if r.created else "already there")

for job in q.dequeue(["emails"], worker_id="w1", lease=30, limit=10):
    try:
        print("sending to", job.payload["to"], "attempt", job.attempts)
        q.ack(job, result={"sent": True})  # LeaseLost if the lease went to another worker
    except leaseq.LeaseLost:
        pass  # someone else owns it now; never write its outcome
    except Exception as exc:
        q.nack(job, error=exc)  # retried with backoff, dead after max_attempts

for name, s in q.stats().items():
    print(name, "available", s.available, "scheduled", s.scheduled, "completed", s.completed)
q.close()
