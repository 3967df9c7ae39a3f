// The status page's script: refreshes the sections every few seconds
// from /api/v1/status?format=html, asks for the admin token when the
// endpoint has one (kept in this tab's sessionStorage, sent as a bearer
// token), and sends the resolve action of unknown records to
// /api/v1/keys/resolve as JSON. No external resources, no inline code.
(function () {
  'use strict';
  var KEY = 'smppproxy-admin-token';
  var EVERY = 5000;
  var body = document.body;
  var main = document.getElementById('status');
  var tokenForm = document.getElementById('token-form');
  var tokenInput = document.getElementById('token');
  var tokenError = document.getElementById('token-error');
  var errorEl = document.getElementById('error');
  var updated = document.getElementById('updated');
  var forget = document.getElementById('forget');
  var needToken = body.dataset.tokenRequired === 'true';
  var timer = null;

  function token() {
    try { return sessionStorage.getItem(KEY) || ''; } catch (e) { return ''; }
  }
  function setToken(t) {
    try {
      if (t) { sessionStorage.setItem(KEY, t); } else { sessionStorage.removeItem(KEY); }
    } catch (e) { /* storage refused: the token lasts until reload */ }
  }
  function headers(extra) {
    var h = extra || {};
    var t = token();
    if (t) { h.Authorization = 'Bearer ' + t; }
    return h;
  }
  function showError(msg) {
    errorEl.textContent = msg;
    errorEl.hidden = !msg;
  }
  function askToken(msg) {
    stop();
    main.replaceChildren();
    tokenForm.hidden = false;
    forget.hidden = true;
    tokenError.textContent = msg || '';
    tokenInput.focus();
  }
  // busy: the operator is typing in a resolve form, which a refresh
  // would wipe out.
  function busy() {
    var inputs = main.querySelectorAll('form.resolve input');
    for (var i = 0; i < inputs.length; i++) {
      if (inputs[i].value || document.activeElement === inputs[i]) { return true; }
    }
    return false;
  }
  function refresh() {
    if (busy() || document.hidden) { return; }
    fetch('/api/v1/status?format=html', { headers: headers(), cache: 'no-store', credentials: 'omit' })
      .then(function (r) {
        if (r.status === 401) {
          var had = token() !== '';
          setToken('');
          askToken(had ? 'That token was refused.' : '');
          return null;
        }
        if (!r.ok) { throw new Error('status: HTTP ' + r.status); }
        return r.text();
      })
      .then(function (html) {
        if (html === null) { return; }
        var doc = new DOMParser().parseFromString(html, 'text/html');
        main.replaceChildren.apply(main, Array.prototype.slice.call(doc.body.childNodes));
        tokenForm.hidden = true;
        forget.hidden = !needToken;
        updated.textContent = 'updated ' + new Date().toLocaleTimeString();
        showError('');
      })
      .catch(function (e) { showError('Refresh failed: ' + e.message); });
  }
  function start() {
    stop();
    refresh();
    timer = setInterval(refresh, EVERY);
  }
  function stop() {
    if (timer !== null) { clearInterval(timer); timer = null; }
  }

  tokenForm.addEventListener('submit', function (e) {
    e.preventDefault();
    var t = tokenInput.value.trim();
    tokenInput.value = '';
    if (!t) { return; }
    setToken(t);
    tokenForm.hidden = true;
    start();
  });
  forget.addEventListener('click', function () {
    setToken('');
    askToken('');
  });
  main.addEventListener('submit', function (e) {
    var form = e.target;
    if (!form.classList || !form.classList.contains('resolve')) { return; }
    e.preventDefault();
    var action = e.submitter ? e.submitter.value : 'accepted';
    var req = { account: form.dataset.account, key: form.dataset.key, by: 'status page' };
    if (form.dataset.segment) { req.segment = form.dataset.segment; }
    var what;
    if (action === 'not_sent') {
      req.not_sent = true;
      what = 'not sent: a retry of this key will be forwarded again';
    } else {
      req.message_id = form.elements.message_id.value.trim();
      if (!req.message_id) { showError('Accepted needs the upstream message id.'); return; }
      what = 'accepted as upstream message ' + req.message_id;
    }
    if (!window.confirm('Resolve ' + req.account + ' / ' + req.key + ' as ' + what + '?')) { return; }
    fetch('/api/v1/keys/resolve', {
      method: 'POST', cache: 'no-store', credentials: 'omit',
      headers: headers({ 'Content-Type': 'application/json' }),
      body: JSON.stringify(req)
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (j) {
        if (r.status === 401) { setToken(''); askToken('That token was refused.'); return; }
        if (!r.ok) { showError('Resolve refused: ' + (j.error || 'HTTP ' + r.status)); return; }
        form.reset();
        showError('');
        updated.textContent = 'resolved ' + req.key + ' (' + j.state + ')';
        refresh();
      });
    }).catch(function (e2) { showError('Resolve failed: ' + e2.message); });
  });
  document.addEventListener('visibilitychange', function () { if (!document.hidden && timer !== null) { refresh(); } });

  if (needToken && !token()) {
    askToken('');
  } else {
    if (needToken) { forget.hidden = false; }
    // The server rendered the page already without a token: refresh later.
    if (needToken) { start(); } else { timer = setInterval(refresh, EVERY); }
  }
}());
