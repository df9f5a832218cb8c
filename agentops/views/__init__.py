"""Server-rendered pages of the platform core, one module per area. Every organization
and project page inherits ``agentops.pages.OrganizationPage`` or ``ProjectPage``, which
check access; the views only parse forms, call one service or selector, and render.

Forms post to the URL of the page that shows them, so a refused submission re-renders
that page with the error; actions on one row of a list (revoke, remove, change a role)
post to their own URL and come back to the list with a message.
"""
