"""Sphinx extension: the door from the published book to its code.

The book does not name its repository: the publishing workflow (.github/workflows/book.yml) passes
`github.repository` as the environment variable BOOK_REPOSITORY ("owner/name"), and the branch as
BOOK_BRANCH (default "main"). With BOOK_REPOSITORY set, every page gets the theme's repository button and
its source button (the page's notebook on GitHub), and every chapter and the intro open with a line that
says how to run it: where the code is, the README's set-up, and the command that opens the chapter. A
local build (no BOOK_REPOSITORY) shows none of them: nothing in the book then points at a guess.
"""

from __future__ import annotations

import os

from docutils import nodes

ENVIRONMENT = "BOOK_REPOSITORY"
BRANCH = "BOOK_BRANCH"


def repository() -> tuple[str, str] | None:
    """(https URL of the repository, branch), or None where the build was not told."""
    name = os.environ.get(ENVIRONMENT, "").strip().strip("/")
    if not name:
        return None
    if name.count("/") != 1 or any(c.isspace() for c in name):
        raise ValueError(
            f"{ENVIRONMENT}={name!r} should be GitHub's owner/name, as github.repository gives it"
        )
    return f"https://github.com/{name}", os.environ.get(BRANCH, "").strip() or "main"


def theme_options(config_options: dict, url: str, branch: str) -> dict:
    """The sphinx-book-theme options that show the repository and the page's source."""
    return {
        **config_options,
        "repository_url": url,
        "repository_branch": branch,
        "path_to_docs": "",
        "use_repository_button": True,
        "use_source_button": True,
    }


def set_repository(app, config) -> None:
    found = repository()
    if found:
        config.html_theme_options = theme_options(
            dict(config.html_theme_options or {}), *found
        )


def door(docname: str, url: str, branch: str) -> nodes.container:
    """'Run this chapter: …' for a chapter, 'The code: …' for the intro."""
    para = nodes.paragraph()
    readme = f"{url}#readme"
    if docname.startswith("notebooks/"):
        notebook = f"{docname}.ipynb"
        para += nodes.strong(text="Run this chapter: ")
        para += nodes.Text("the code is in ")
        para += nodes.reference(text=url.removeprefix("https://"), refuri=url)
        para += nodes.Text("; after the ")
        para += nodes.reference(text="README's set-up", refuri=readme)
        para += nodes.Text(", ")
        para += nodes.literal(text=f"jupyter lab {notebook}")
        para += nodes.Text(" opens it (")
        para += nodes.reference(
            text="the notebook on GitHub", refuri=f"{url}/blob/{branch}/{notebook}"
        )
        para += nodes.Text(").")
    else:
        para += nodes.strong(text="The code: ")
        para += nodes.reference(text=url.removeprefix("https://"), refuri=url)
        para += nodes.Text(", with the ")
        para += nodes.reference(text="README's set-up", refuri=readme)
        para += nodes.Text(".")
    return nodes.container("", para, classes=["course-door"])


def add_door(app, doctree, docname: str) -> None:
    found = repository()
    if not found or not (
        docname.startswith("notebooks/") or docname == app.config.root_doc
    ):
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        return
    title = next(iter(section.findall(nodes.title)), None)
    section.insert(
        section.index(title) + 1 if title is not None else 0, door(docname, *found)
    )


def setup(app):
    app.connect("config-inited", set_repository)
    app.connect("doctree-resolved", add_door)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
