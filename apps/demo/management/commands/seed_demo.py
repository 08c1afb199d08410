from django.core.management.base import BaseCommand

from apps.demo.services import DEMO_SLUG, seed_demo


class Command(BaseCommand):
    help = "Load the demo organisation (slug 'demo') and its people. Running it again changes nothing."

    def handle(self, *args, **options):
        result = seed_demo()
        self.stdout.write(f"Demo organisation '{DEMO_SLUG}' {'seeded' if result.created else 'already in place'}.")
        for email, password in result.logins.items():
            shown = password or "(set earlier; reset with: manage.py changepassword " + email + ")"
            self.stdout.write(f"  {email:<26} {shown}")
