"""The shop's tasks: found by ``manage.py leaseq_worker`` (every installed app's tasks.py)."""

from django.db import close_old_connections

from leaseq.contrib.django import app
from shop.models import Order


@app.task(queue="receipts", max_attempts=3)
def send_receipt(order_id: int) -> str:
    """Send the receipt of an order (here: mark it sent) and return the address."""
    # Worker threads are not requests: drop a connection the server closed or one past
    # CONN_MAX_AGE before using the ORM, as Django does around each request.
    close_old_connections()
    order = Order.objects.get(pk=order_id)
    Order.objects.filter(pk=order_id).update(receipt_sent=True)
    return order.email
