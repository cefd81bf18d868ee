// Progressive enhancement; every page works without it (the CSP allows only this file).
// - A copy button for each ready-to-paste block (`data-copy` names the element to copy).
// - The section bar marks the section shown (`aria-current`), which CSS shows by `:target`;
//   a submodule or example the URL names is opened.
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

document.addEventListener("DOMContentLoaded", () => {
  copyButtons();
  currentSection();
});
