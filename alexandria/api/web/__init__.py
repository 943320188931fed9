"""The library in a browser: server-rendered HTML pages over the read models, with scripts
(``static/``) that only enhance them (in-browser verification, live search)."""
