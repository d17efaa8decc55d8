"""Offline analysis of a run's lineage: tables (pure DataFrame functions), plots (figures from
those tables) and the page (HTML, Markdown or JSON). Reads only the lineage and run.json."""
