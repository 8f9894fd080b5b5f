// Accessible names that match what the reader sees (WCAG 2.5.3 "label in name"; the site's axe audit,
// tests/test_site.py). The theme and myst-nb label some controls with words that are not on them:
// a speech-input user saying what they see ("click show code cell source") would not reach them.
document.addEventListener("DOMContentLoaded", function () {
  // myst-nb's hide-input toggles: aria-label "Toggle hidden content", visible "Show code cell source".
  document.querySelectorAll("details.hide > summary[aria-label]").forEach(function (summary) {
    summary.removeAttribute("aria-label");
  });
  // The search buttons: visible "Search" and a Ctrl+K hint, named "Search".
  document.querySelectorAll(".search-button-field[aria-label]").forEach(function (button) {
    button.setAttribute("aria-label", button.textContent.replace(/\s+/g, " ").trim());
  });
  // The light/dark switch and any other button or link whose name leaves out its visible text.
  document.querySelectorAll("button[aria-label], a[aria-label]").forEach(function (control) {
    var visible = control.innerText.replace(/\s+/g, " ").trim();
    var name = control.getAttribute("aria-label");
    if (visible && name.toLowerCase().indexOf(visible.toLowerCase()) === -1) {
      control.setAttribute("aria-label", visible + " (" + name + ")");
    }
  });
});
