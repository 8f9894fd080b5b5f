// Accessible names that match what the reader sees (WCAG 2.5.3 "label in name"), and roles that are
// valid ARIA, checked by the site's accessibility audit (axe-core, tests/test_site.py). The theme,
// myst-nb and sphinxcontrib-bibtex produce these; a speech-input user saying what they see ("click
// show code cell source") would not reach the control otherwise.
(function () {
  function fix() {
    // myst-nb's hide-input toggles: aria-label "Toggle hidden content", visible "Show code cell source".
    document.querySelectorAll("details.hide > summary[aria-label]").forEach(function (summary) {
      summary.removeAttribute("aria-label");
    });
    // The search buttons: visible "Search" and a Ctrl+K hint, named "Search".
    document.querySelectorAll(".search-button-field[aria-label]").forEach(function (button) {
      button.setAttribute("aria-label", button.textContent.replace(/\s+/g, " ").trim());
    });
    // Icons inside a labelled button are decoration: the light/dark switch is named "Color mode",
    // its icons' titles ("Light", "Dark") are not what a reader says.
    document.querySelectorAll("button[aria-label] svg, a[aria-label] svg").forEach(function (icon) {
      icon.setAttribute("aria-hidden", "true");
      icon.removeAttribute("aria-labelledby");
      icon.querySelectorAll("title").forEach(function (title) { title.remove(); });
    });
    // Any other button or link whose name leaves out its visible text gets both.
    document.querySelectorAll("button[aria-label], a[aria-label]").forEach(function (control) {
      var visible = control.innerText.replace(/\s+/g, " ").trim();
      var name = control.getAttribute("aria-label");
      if (visible && name.toLowerCase().indexOf(visible.toLowerCase()) === -1) {
        control.setAttribute("aria-label", visible + " (" + name + ")");
      }
    });
    // The bibliography: a role="list" of entries with the deprecated role doc-biblioentry; a list holds
    // list items.
    document.querySelectorAll('[role="doc-biblioentry"]').forEach(function (entry) {
      entry.setAttribute("role", "listitem");
    });
  }
  document.addEventListener("DOMContentLoaded", fix);
  window.addEventListener("load", fix);
  // Font Awesome turns icons into SVGs after the page has loaded: fix those too, for a few seconds.
  var observer = new MutationObserver(fix);
  document.addEventListener("DOMContentLoaded", function () {
    observer.observe(document.body, {childList: true, subtree: true});
    setTimeout(function () { observer.disconnect(); }, 5000);
  });
})();
