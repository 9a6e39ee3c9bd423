"""An order, and whether its receipt went out."""

from django.db import models


class Order(models.Model):
    """A customer's order; ``receipt_sent`` is set by the ``send_receipt`` task."""

    email = models.EmailField()
    receipt_sent = models.BooleanField(default=False)
