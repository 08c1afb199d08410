from django.core.management.base import BaseCommand, CommandError

from apps.accounts import lockouts
from apps.core.errors import DomainError


class Command(BaseCommand):
    help = "Lift a sign-in lockout (too many wrong passwords) for an account, an address, or both."

    def add_arguments(self, parser):
        parser.add_argument("--email", default="", help="the account's email")
        parser.add_argument("--ip", default="", help="the client address that was locked out")

    def handle(self, *args, email, ip, **options):
        try:
            cleared = lockouts.unlock(email=email, ip=ip)
        except DomainError as exc:
            raise CommandError(exc.message) from None
        what = " and ".join(x for x in (email and f"account {email}", ip and f"address {ip}") if x)
        self.stdout.write(f"Unlocked {what}: {cleared} failure record(s) cleared.")
