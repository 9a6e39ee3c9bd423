// Enqueue leaseq jobs from Node.js 18+ with its built-in fetch, through `leaseq dashboard`
// (docs/enqueue-from-sql-and-http.md). Run the dashboard with a token, then:
//
//   LEASEQ_DASHBOARD_URL=http://127.0.0.1:8787 LEASEQ_DASHBOARD_TOKEN=... \
//     node examples/enqueue_over_http.mjs
//
// tests/dashboard/test_enqueue_http.py runs this file against a real server.

const base = process.env.LEASEQ_DASHBOARD_URL ?? "http://127.0.0.1:8787";
const token = process.env.LEASEQ_DASHBOARD_TOKEN;

class LeaseqHttpError extends Error {
  constructor(status, error) {
    super(`${status} ${error.type}: ${error.message}`);
    this.status = status;
    this.type = error.type;
  }
}

// POSTs one job; resolves to {id, created}. created is false when a live job already
// holds the unique_key: then id is that job's. A full queue (429) is tried again after
// its Retry-After, up to `tries` times.
async function enqueue(queue, job, tries = 3) {
  for (let attempt = 1; ; attempt++) {
    const response = await fetch(`${base}/api/queues/${encodeURIComponent(queue)}/jobs`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(job),
    });
    const body = await response.json();
    if (response.ok) return body;
    if (response.status === 429 && attempt < tries) {
      const seconds = Number(response.headers.get("retry-after") ?? 1);
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
      continue;
    }
    throw new LeaseqHttpError(response.status, body.error);
  }
}

const receipt = { payload: { order_id: 42 }, kind: "send_receipt", unique_key: "receipt-42" };
const first = await enqueue("emails", receipt);
const again = await enqueue("emails", receipt);           // the same live job
const later = await enqueue("reports", { payload: { day: "2030-01-01" }, delay: 3600 });
let refused = null;
try {
  await enqueue("emails", { payload: { order_id: 43 }, priority: "high" });
} catch (error) {
  refused = { status: error.status, type: error.type, message: error.message };
}
console.log(JSON.stringify({ first, again, later, refused }));
