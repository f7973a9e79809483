from __future__ import annotations

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def create_default_gate(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    apps.get_model("approvals", "Gate").objects.get_or_create(name="")


class Migration(migrations.Migration):
    dependencies = [("approvals", "0001_initial")]
    operations = [migrations.RunPython(create_default_gate, migrations.RunPython.noop)]
