from django.core.management.base import BaseCommand, CommandError

from apps.accounts import selectors, services
from apps.accounts.roles import TOKEN_ROLES
from apps.core.errors import DomainError


class Command(BaseCommand):
    help = "Print a new API token for an organisation (for scripts and operations)."

    def add_arguments(self, parser):
        parser.add_argument("org_slug")
        parser.add_argument("--role", required=True, choices=[str(r) for r in TOKEN_ROLES])
        parser.add_argument("--name", default="cli")
        parser.add_argument("--member", default=None, metavar="EMAIL",
                            help="The member who holds the token (default: the organisation's earliest owner).")

    def handle(self, *args, org_slug, role, name, member=None, **options):
        try:
            org = selectors.get_org_by_slug(org_slug)
            _, raw = services.create_api_token(actor=None, org_id=org.id, name=name, role=role,
                                                member_email=member)
        except DomainError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(raw)
