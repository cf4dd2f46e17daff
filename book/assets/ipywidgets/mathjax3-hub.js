// The ipywidgets HTML manager (embed.js) typesets widget labels through MathJax 2's `MathJax.Hub.Queue`
// whenever `window.MathJax` exists. The book loads MathJax 3, which has no `Hub`, so every label threw
// "Cannot read properties of undefined (reading 'Queue')". This gives MathJax 3 a Hub whose Queue
// typesets the element with MathJax 3's own call. It must be loaded before embed.js; it runs once the
// deferred MathJax script has replaced `window.MathJax`, before the widgets render on "load".
(function () {
  function addHub() {
    var mj = window.MathJax;
    if (mj && !mj.Hub) {
      mj.Hub = {
        Queue: function (job) {
          var element = job && job[2];
          if (element && mj.typesetPromise) {
            mj.typesetPromise([element]).catch(function () {});
          }
        },
      };
    }
  }
  document.addEventListener("DOMContentLoaded", addHub);
})();
