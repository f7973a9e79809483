"""The SQL written out for the hot paths, one module per table (docs/architecture.md).

Nowhere else in the project is SQL written out: everything else goes through the ORM.
``sql`` runs the statements and builds their names from the models' metadata.
"""
