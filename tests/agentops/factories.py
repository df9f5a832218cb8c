"""factory_boy factories for the core. They write with the unscoped manager: test set-up
is not a request, and the scoping guard is tested on its own."""

import factory
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model

from agentops.models import Membership, Organization, Project
from agentops.roles import Role

PASSWORD = "correct-horse-battery-staple"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.Sequence(lambda n: f"user{n}@example.com")

    @factory.post_generation
    def password(user, create, extracted, **kwargs):
        user.set_password(extracted or PASSWORD)
        if create:
            user.save(update_fields=["password"])

    @factory.post_generation
    def verified_email(user, create, extracted, **kwargs):
        if create:
            EmailAddress.objects.create(user=user, email=user.email, verified=extracted is not False, primary=True)


class OrganizationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Organization

    name = factory.Sequence(lambda n: f"Organization {n}")
    slug = factory.Sequence(lambda n: f"org-{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    organization = factory.SubFactory(OrganizationFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.MEMBER

    @classmethod
    def _get_manager(cls, model_class):
        return model_class.dangerously_unscoped_objects


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    organization = factory.SubFactory(OrganizationFactory)
    name = factory.Sequence(lambda n: f"Project {n}")
    slug = factory.Sequence(lambda n: f"project-{n}")

    @classmethod
    def _get_manager(cls, model_class):
        return model_class.dangerously_unscoped_objects
