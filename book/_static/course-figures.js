// Figures that a narrow screen shrinks open at full size. A matplotlib figure 700-900 px wide, scaled into a
// 390 px phone's column, shows its labels at about 6 px. Under each figure (a cell's output image or a slider
// figure's frame) shown at less than SHRUNK of its natural width, a button opens it in a dialog at its natural
// width, scrolling inside the dialog (the page itself never scrolls sideways); a tap on the figure does the
// same. Close, Escape or a tap outside closes it, and the focus returns to the button. Where a figure fits
// (a desktop), nothing is added. Checked by tests/test_site.py (test_a_phone_opens_each_figure_full_size and,
// on every page at 390 px, test_a_phone_never_scrolls_the_page_sideways).
(function () {
  var SHRUNK = 0.75;  // displayed / natural width under which a figure gets its button
  var FIGURES = "div.cell_output img, .ls-interactive img";
  var dialog = null, full = null, opener = null;

  function makeDialog() {
    dialog = document.createElement("dialog");
    dialog.className = "ls-figure-dialog";
    dialog.setAttribute("aria-label", "Figure at full size");
    var close = document.createElement("button");
    close.type = "button";
    close.className = "ls-figure-close";
    close.textContent = "Close";
    close.addEventListener("click", function () { dialog.close(); });
    full = document.createElement("img");
    dialog.append(close, full);
    dialog.addEventListener("click", function (event) { if (event.target === dialog) dialog.close(); });
    dialog.addEventListener("close", function () { if (opener) opener.focus(); });
    document.body.appendChild(dialog);
  }

  function open(img, button) {
    if (!dialog) makeDialog();
    full.src = img.currentSrc || img.src;  // a slider figure: the frame shown now
    full.alt = img.alt;
    full.style.width = img.naturalWidth + "px";
    opener = button;
    dialog.showModal();
    dialog.scrollTo(0, 0);
  }

  function buttonOf(img) {
    var next = img.nextElementSibling;
    return next && next.classList.contains("ls-enlarge") ? next : null;
  }

  function addButton(img) {
    var button = document.createElement("button");
    button.type = "button";
    button.className = "ls-enlarge";
    button.textContent = "Open the figure at full size";
    button.addEventListener("click", function () { open(img, button); });
    img.addEventListener("click", function () { if (!button.hidden) open(img, button); });
    img.insertAdjacentElement("afterend", button);
    return button;
  }

  function update() {
    document.querySelectorAll(FIGURES).forEach(function (img) {
      if (!img.complete || !img.naturalWidth) {
        img.addEventListener("load", update, {once: true});
        return;
      }
      var width = img.getBoundingClientRect().width;
      if (width === 0) return;  // not shown (a closed dropdown): decided when it opens
      var shrunk = width < SHRUNK * img.naturalWidth;
      var button = buttonOf(img) || (shrunk ? addButton(img) : null);
      if (button) button.hidden = !shrunk;
      img.classList.toggle("ls-shrunk", shrunk);
    });
  }

  var pending = null;
  function later() {
    clearTimeout(pending);
    pending = setTimeout(update, 150);
  }
  document.addEventListener("DOMContentLoaded", update);
  window.addEventListener("load", update);
  window.addEventListener("resize", later);
  document.addEventListener("toggle", later, true);  // a <details> opened: its figures have a width now
})();
