"use strict";
// Filtering: show the effects of the verdicts ticked whose text holds the words typed.
// Ids: a click shows a cut id whole, selected, and copies it. The script reads the page's
// own attributes and text, and writes nothing but classes, text and the clipboard.
(function () {
  for (const id of document.querySelectorAll("code.id[data-id]")) {
    if (id.closest("a")) {
      continue; // a link: a click follows it (the id it leads to is copied there)
    }
    id.addEventListener("click", (event) => {
      event.preventDefault();
      id.textContent = id.dataset.id;
      const range = document.createRange();
      range.selectNodeContents(id);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      if (navigator.clipboard) {
        navigator.clipboard.writeText(id.dataset.id).then(
          () => id.classList.add("copied"),
          () => {},
        );
      }
    });
  }
})();
(function () {
  const filters = document.getElementById("filters");
  if (!filters) {
    return;
  }
  const boxes = Array.from(filters.querySelectorAll("input[data-verdict]"));
  const search = filters.querySelector("input[type=search]");
  const count = document.getElementById("filter-count");
  function apply() {
    const ticked = new Set(boxes.filter((b) => b.checked).map((b) => b.dataset.verdict));
    const needle = search.value.trim().toLowerCase();
    let shown = 0;
    for (const item of document.querySelectorAll("main [data-verdict]")) {
      const visible =
        ticked.has(item.dataset.verdict) &&
        (needle === "" || item.textContent.toLowerCase().includes(needle));
      item.classList.toggle("filtered", !visible);
      shown += visible && item.classList.contains("lane") ? 1 : 0;
    }
    count.textContent = `${shown} lane(s) shown`;
  }
  for (const box of boxes) {
    box.addEventListener("change", apply);
  }
  search.addEventListener("input", apply);
  filters.hidden = false;
})();
