"""The worker side of the shop: ``leaseq worker tasks:tasks --queues emails``.

``app.py`` enqueues jobs of kind ``send_confirmation`` with the payload
``{"order_id": ...}``: the name given to the task below, and its keyword arguments.
"""

from __future__ import annotations

import os

import leaseq

tasks = leaseq.App(os.environ.get("DATABASE_URL", "sqlite:///shop.db"),
                   table_prefix=os.environ.get("LEASEQ_TABLE_PREFIX", "leaseq_"))


@tasks.task(queue="emails", name="send_confirmation")  # the kind app.py enqueues
def send_confirmation(order_id: int) -> dict[str, int]:
    """Send the order's confirmation email (here: print it)."""
    print(f"order {order_id}: confirmation sent")
    return {"order_id": order_id}
