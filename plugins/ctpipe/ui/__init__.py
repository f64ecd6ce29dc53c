"""The "Continuous training" page of the Airflow UI: lineage of each cycle, curves, links."""
