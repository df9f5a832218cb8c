from agentops import selectors


def navigation(request):
    """The organizations of the signed-in user, for the organization switcher."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"nav_organizations": selectors.organizations_for_user(user=user)}
