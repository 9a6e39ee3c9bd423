"""``manage.py place_order EMAIL [--fail]``: an order and its receipt job, in one
transaction. ``--fail`` raises after both were written, so neither is kept."""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from shop.models import Order
from shop.tasks import send_receipt


class Command(BaseCommand):
    help = "Place an order; its receipt job commits or rolls back with it."

    def add_arguments(self, parser):
        parser.add_argument("email")
        parser.add_argument("--fail", action="store_true",
                            help="Fail after enqueueing: the order and the job roll back.")

    def handle(self, email, fail, **options):
        try:
            with transaction.atomic():
                order = Order.objects.create(email=email)
                job = send_receipt.enqueue(order_id=order.pk)  # joins this transaction
                if fail:
                    raise RuntimeError(f"payment declined (order {order.pk}, job {job.id})")
        except RuntimeError as exc:
            raise CommandError(f"{exc}: nothing was kept") from exc
        self.stdout.write(f"order {order.pk} job {job.id}")
