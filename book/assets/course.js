// The book's small page fixes, loaded on every page (book/_ext/page_fixes.py adds this file).
"use strict";

// A node cut at its line breaks: one copy of it per line (an element is copied without its children, and
// each copy gets its children's pieces of that line), so highlighted code keeps its colours.
function splitAtLineBreaks(node) {
  if (node.nodeType === Node.TEXT_NODE) {
    return node.textContent.split("\n").map((text) => document.createTextNode(text));
  }
  const lines = [[]];
  for (const child of [...node.childNodes]) {
    splitAtLineBreaks(child).forEach((piece, i) => {
      if (i > 0) lines.push([]);
      lines[lines.length - 1].push(piece);
    });
  }
  return lines.map((children) => {
    const copy = node.cloneNode(false);
    copy.append(...children);
    return copy;
  });
}

// Each line of a code or output box in a `span.course-line` carrying its indent (course.css): a line too
// long for the box wraps with a hanging indent. The text (and so what the copy button copies) is unchanged.
function lineByLine(pre) {
  const lines = [[]];
  for (const child of [...pre.childNodes]) {
    splitAtLineBreaks(child).forEach((piece, i) => {
      if (i > 0) lines.push([]);
      lines[lines.length - 1].push(piece);
    });
  }
  if (lines.length > 1 && lines[lines.length - 1].every((n) => !n.textContent)) lines.pop();
  pre.replaceChildren(
    ...lines.map((pieces) => {
      const line = document.createElement("span");
      line.className = "course-line";
      line.append(...pieces, "\n");
      const indent = line.textContent.match(/^ */)[0].length;
      if (indent) line.style.setProperty("--course-indent", `${indent}ch`);
      return line;
    }),
  );
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("div.highlight pre, div.cell_output pre, div.output pre").forEach(lineByLine);

  // The chapter menu (☰) and the contents button. pydata-sphinx-theme binds its click handler to the
  // first `.primary-toggle` / `.secondary-toggle` in the page, which sphinx-book-theme leaves hidden in
  // the top bar; the visible buttons in the article's header get none, so below 992 px they did nothing
  // (pydata-sphinx-theme #2451, sphinx-book-theme #988). A click on any other copy is passed to the
  // first one, which opens the panel (or, on a wide screen, folds the sidebar away).
  for (const kind of ["primary", "secondary"]) {
    const [bound, ...others] = document.querySelectorAll(`.${kind}-toggle`);
    for (const button of others) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        button.blur();
        bound.click();
      });
    }
  }

  // A figure opens at full size: each image of an output or a figure becomes a link to its own file
  // (not the explorer's map, which its widget redraws).
  for (const img of document.querySelectorAll(".cell_output img, figure img, .figure img")) {
    if (img.closest("a, .jupyter-widgets") || !img.getAttribute("src") || img.src.startsWith("data:")) continue;
    const link = document.createElement("a");
    link.href = img.src;
    link.className = "course-full-size";
    link.title = "Open the figure at full size";
    img.replaceWith(link);
    link.appendChild(img);
  }
});
