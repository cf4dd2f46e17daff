"""Sphinx extension: two fixes so that a first visit to the book logs no console error.

- sphinx-thebe registers its inline configuration script each time the environment is read, and
  Jupyter Book 1 reads it twice, so every page declared `const THEBE_JS_URL` twice ("Identifier has
  already been declared"; one copy has filename None, the other ''). Identical scripts are kept once.
- pydata-sphinx-theme starts a page with `dataset.mode = localStorage.mode || ""`, then rejects the empty
  mode with a console error on a reader's first visit. An empty mode is set to "auto" (the theme's own
  default) before the theme's script reads it.
"""

from __future__ import annotations

EMPTY_MODE_IS_AUTO = 'if (!document.documentElement.dataset.mode) { document.documentElement.dataset.mode = "auto"; }'


def keep_scripts_once(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        attributes = getattr(script, "attributes", {})
        key = (
            getattr(script, "filename", script) or "",
            tuple(sorted(attributes.items())),
        )  # None and '' alike
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def setup(app):
    app.add_js_file(None, body=EMPTY_MODE_IS_AUTO, priority=1)
    app.connect("html-page-context", keep_scripts_once)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
