"""The Forge dashboard (Streamlit): review pages over ``forge.review``, training pages over ``registry/``.

    forge review serve            # http://127.0.0.1:8501

``app.py`` is the entry point (login gate + navigation); ``views/`` holds one script per page; the modules here
hold what the pages share: the signed-in user and the review store (``session``), the admin actions that re-check
the role server-side (``actions``), and the plain data loaders the charts draw (``data``).
"""
