/* Review queue: keyboard shortcuts and "select all". The page works without it. */
(function () {
  "use strict";

  document.querySelectorAll("[data-js-only]").forEach(function (element) { element.hidden = false; });

  var items = Array.prototype.slice.call(document.querySelectorAll("[data-proposal]"));
  var current = -1;

  function focusItem(index) {
    if (!items.length) { return; }
    current = Math.max(0, Math.min(items.length - 1, index));
    items.forEach(function (item, i) { item.classList.toggle("is-current", i === current); });
    items[current].focus();
    items[current].scrollIntoView({ block: "nearest" });
  }

  function currentItem() {
    var active = document.activeElement && document.activeElement.closest("[data-proposal]");
    if (active) { current = items.indexOf(active); }
    return current >= 0 ? items[current] : null;
  }

  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) {
      if (event.key === "Escape" && typing(event.target)) { event.target.blur(); focusItem(current); }
      return;
    }
    var item = currentItem();
    switch (event.key) {
      case "j": focusItem(current + 1); break;
      case "k": focusItem(current - 1); break;
      case "a":
        if (!item) { return; }
        item.querySelector("form[data-approve]").requestSubmit();
        break;
      case "r":
        if (!item) { return; }
        item.querySelector("form[data-reject] input[name=reason]").focus();
        break;
      case "e":
        if (!item) { return; }
        window.location.assign(item.querySelector("a[data-edit]").href);
        break;
      case "x":
        if (!item) { return; }
        var box = item.querySelector("input[data-select]");
        box.checked = !box.checked;
        break;
      default:
        return;
    }
    event.preventDefault();
  });

  items.forEach(function (item, i) {
    item.addEventListener("focusin", function () {
      current = i;
      items.forEach(function (other, j) { other.classList.toggle("is-current", j === i); });
    });
  });

  var all = document.querySelector("[data-select-all]");
  if (all) {
    all.addEventListener("change", function () {
      document.querySelectorAll("input[data-select]").forEach(function (box) { box.checked = all.checked; });
    });
  }
})();
