/* Connect page: "Copy" buttons. Without this file the snippets are still there to select. */
(function () {
  "use strict";

  function select(element) {
    var range = document.createRange();
    range.selectNodeContents(element);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  function done(button, label) {
    button.textContent = label;
    window.setTimeout(function () { button.textContent = "Copy"; }, 2000);
  }

  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    var source = document.getElementById(button.dataset.copy);
    if (!source) { return; }
    button.hidden = false;
    button.addEventListener("click", function () {
      var text = source.textContent;
      // Selected either way, so Ctrl-C works where the clipboard is not offered.
      select(source);
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(
          function () { done(button, "Copied"); },
          function () { done(button, "Selected: press Ctrl-C"); }
        );
      } else {
        done(button, "Selected: press Ctrl-C");
      }
    });
  });
})();
