"""Integrations of leaseq with frameworks, built on the public API only (``App``,
``Queue``, the CLI). Nothing in leaseq's core imports them; each needs its own extra:

* ``leaseq.contrib.django``: ``pip install 'leaseq[django]'`` (docs/django.md).
"""
