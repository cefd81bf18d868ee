// Progressive enhancement; every page works without it (the CSP allows only this file).
// - A copy button for each ready-to-paste block (`data-copy` names the element to copy).
// - The section bar marks the section shown (`aria-current`), which CSS shows by `:target`;
//   a submodule or example the URL names is opened.
// - A page still being read (`<body data-reload-after="N">`: a module being indexed, a version
//   whose details are being read) reloads itself after N seconds; without JavaScript its status
//   message has a "Reload now" link.
// - A filter over Inputs and Outputs (`.filter[data-filter]`, hidden without script: all stay shown).
// - The version picker closes on Escape or a click elsewhere (it is a <details>: it opens without script).
// - A README table or code block wider than its box scrolls; it takes the keyboard focus, so it
//   scrolls from the keyboard too.
"use strict";

function copyButtons() {
  for (const button of document.querySelectorAll("button[data-copy]")) {
    const source = document.getElementById(button.dataset.copy);
    if (!source) continue;
    button.hidden = false;
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(source.textContent);
        button.textContent = "Copied";
      } catch {
        // No clipboard (a page not served over HTTPS): select the text for Ctrl-C.
        const range = document.createRange();
        range.selectNodeContents(source);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        button.textContent = "Press Ctrl-C";
      }
      setTimeout(() => { button.textContent = "Copy"; }, 2000);
    });
  }
}

function currentSection() {
  const tabs = document.querySelectorAll(".tabs a[data-tab]");
  if (!tabs.length) return;
  const mark = () => {
    const target = location.hash ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
    if (target instanceof HTMLDetailsElement) target.open = true;  // a submodule or example named in the URL
    const panel = target ? target.closest(".panel") : null;
    const shown = panel ? panel.id : "readme";
    for (const tab of tabs) {
      if (tab.dataset.tab === shown) tab.setAttribute("aria-current", "true");
      else tab.removeAttribute("aria-current");
    }
  };
  mark();
  window.addEventListener("hashchange", mark);
}

function reloadWhenRead() {
  const seconds = Number.parseInt(document.body.dataset.reloadAfter || "", 10);
  if (!(seconds > 0)) return;
  setTimeout(() => { location.reload(); }, Math.min(seconds, 60) * 1000);
}

function filters() {
  for (const box of document.querySelectorAll(".filter[data-filter]")) {
    const section = box.closest(".panel");
    const field = box.querySelector("input");
    const count = box.querySelector(".shown-count");
    if (!section || !field || !count) continue;
    const items = [...section.querySelectorAll(":scope > .vars > .var")];
    // By name and description (not type or default), as written.
    const words = (item) => [...item.querySelectorAll(".var-name, .var-desc")].map((e) => e.textContent).join(" ").toLowerCase();
    const texts = new Map(items.map((item) => [item, words(item)]));
    box.hidden = false;
    const apply = () => {
      const terms = field.value.toLowerCase().split(/\s+/).filter(Boolean);
      let shown = 0;
      for (const item of items) {
        const text = texts.get(item);
        item.hidden = !terms.every((t) => text.includes(t));
        if (!item.hidden) shown += 1;
      }
      // A group (required, optional) with nothing left hides its heading too.
      for (const list of section.querySelectorAll(":scope > .vars")) {
        const empty = ![...list.children].some((item) => !item.hidden);
        list.hidden = empty;
        const heading = list.previousElementSibling;
        if (heading && heading.classList.contains("group")) heading.hidden = empty;
      }
      count.textContent = terms.length ? `${shown} of ${items.length} shown` : "";
    };
    field.addEventListener("input", apply);
    apply();
  }
}

function picker() {
  for (const details of document.querySelectorAll("details.picker")) {
    document.addEventListener("click", (event) => {
      if (details.open && !details.contains(event.target)) details.open = false;
    });
    details.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && details.open) {
        details.open = false;
        details.querySelector("summary").focus();
      }
    });
  }
}

function scrollableBoxes() {
  const mark = () => {
    for (const box of document.querySelectorAll(".markdown table, .markdown pre")) {
      if (box.scrollWidth > box.clientWidth + 1 && !box.hasAttribute("tabindex")) {
        box.tabIndex = 0;
        box.setAttribute("role", "region");
        box.setAttribute("aria-label", `${box.tagName === "TABLE" ? "Table" : "Code"}, scrolls sideways`);
      }
    }
  };
  mark();
  window.addEventListener("hashchange", mark);  // a section shown now was not laid out before
  window.addEventListener("resize", mark);
}

document.addEventListener("DOMContentLoaded", () => {
  copyButtons();
  filters();
  picker();
  scrollableBoxes();
  currentSection();
  reloadWhenRead();
});
