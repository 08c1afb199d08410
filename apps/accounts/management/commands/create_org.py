from django.core.management.base import BaseCommand, CommandError

from apps.accounts import services
from apps.core.errors import DomainError


class Command(BaseCommand):
    help = "Create an organisation and its owner (prints a password when the user is new)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--owner", required=True, help="Owner's email address")
        parser.add_argument("--name", default="", help="Display name (defaults to the slug)")

    def handle(self, *args, slug, owner, name, **options):
        try:
            org, membership, password = services.create_organization(
                name=name or slug, slug=slug, owner_email=owner
            )
        except DomainError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"Created organisation {org.slug} ({org.id}) owned by {membership.user.email}")
        if password:
            self.stdout.write(f"Password for {membership.user.email}: {password}")
