"""Make the audit log append-only in the database itself, so no code path (nor a
mistaken admin action or shell session) can change or delete an event."""

from django.db import migrations

FORWARD = """
CREATE FUNCTION agentops_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % refused', TG_OP;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER agentops_auditevent_append_only
    BEFORE UPDATE OR DELETE ON agentops_auditevent
    FOR EACH ROW EXECUTE FUNCTION agentops_audit_append_only();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS agentops_auditevent_append_only ON agentops_auditevent;
DROP FUNCTION IF EXISTS agentops_audit_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("agentops", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
