// tccd console: read-only views over the Admin API (console_server.h).
// No framework; every value is set as text (never parsed as HTML).
'use strict';

const FINAL = ['TXN_STATE_CONFIRMED', 'TXN_STATE_CANCELLED'];
const UNFINISHED = ['open', 'trying', 'awaiting_approval', 'confirming', 'cancelling'];
let refreshTimer = null;
let watch = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function short(enumName, prefix) {
  return String(enumName || '').replace(prefix, '').toLowerCase();
}
function stateName(s) { return short(s, 'TXN_STATE_'); }
function ms(v) { return Number(v || 0); }
function when(v) {
  const t = ms(v);
  return t ? new Date(t).toISOString().replace('T', ' ').replace('Z', '') : '';
}
function age(v) {
  const t = ms(v);
  if (!t) return '';
  let s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 120) return s + ' s';
  if (s < 7200) return Math.round(s / 60) + ' min';
  return Math.round(s / 3600) + ' h';
}
function hex(b64) {
  if (!b64) return '';
  return Array.from(atob(b64), c => c.charCodeAt(0).toString(16).padStart(2, '0')).join('');
}
function badge(text, kind) { return el('span', {class: 'badge ' + (kind || '')}, text); }
function stateBadge(s) {
  const n = stateName(s);
  const kind = n === 'confirmed' ? 'ok' : n === 'cancelled' ? '' :
      (n === 'confirming' || n === 'cancelling') ? 'warn' : '';
  return badge(n, kind);
}
function gidLink(gid) {
  return el('a', {href: '#/txn/' + encodeURIComponent(gid), class: 'mono'}, gid);
}

async function api(path) {
  const r = await fetch(path, {credentials: 'same-origin', cache: 'no-store'});
  if (r.status === 401) { window.location.assign('/login'); throw new Error('signed out'); }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error((body.code || r.status) + ': ' + (body.message || r.statusText));
  return body;
}

function setView(...children) {
  const v = document.getElementById('view');
  v.replaceChildren(...children.filter(c => c !== null && c !== undefined));
  document.getElementById('updated').textContent = 'Updated ' + new Date().toLocaleTimeString();
}

function table(id, headers, rows, emptyText) {
  if (!rows.length) return el('p', {id, class: 'empty'}, emptyText);
  return el('table', {id},
      el('thead', {}, el('tr', {}, headers.map(h => el('th', {}, h)))),
      el('tbody', {}, rows));
}

function card(k, v, id) {
  return el('div', {class: 'card', id}, el('div', {class: 'k'}, k), el('div', {class: 'v'}, v));
}

function setHealth(h) {
  const b = document.getElementById('health');
  b.textContent = h;
  b.className = 'badge ' + (h === 'serving' ? 'ok' : h === 'failed' ? 'bad' : 'warn');
}

async function overview() {
  const [status, phase2, oldest] = await Promise.all([
    api('/api/status'),
    api('/api/list?states=confirming,cancelling&page_size=200'),
    api('/api/list?states=' + UNFINISHED.join(',') + '&page_size=10'),
  ]);
  setHealth(status.health);
  const counts = {};
  for (const c of status.in_flight || []) counts[stateName(c.state)] = Number(c.count);
  // List gives summaries; the branches (and their STUCK flags) come with
  // Show, read only while tccd counts stuck branches, for the first 20.
  const stuckRows = [];
  const shown = Number(status.stuck_branches) ?
      await Promise.all((phase2.transactions || []).slice(0, 20).map(
          t => api('/api/show?gid=' + encodeURIComponent(t.gid)).then(s => s.transaction))) : [];
  for (const t of shown) {
    for (const b of t.branches || []) {
      if (!b.stuck) continue;
      stuckRows.push(el('tr', {class: 'stuck-row'},
          el('td', {}, gidLink(t.gid)), el('td', {class: 'mono'}, b.branch_id),
          el('td', {}, b.participant), el('td', {}, stateName(t.state)),
          el('td', {}, b.second_phase.attempts),
          el('td', {class: 'mono'}, b.second_phase.last_error)));
    }
  }
  const oldestRows = (oldest.transactions || []).map(t => el('tr', {},
      el('td', {}, gidLink(t.gid)), el('td', {}, stateBadge(t.state)),
      el('td', {}, age(t.registered_at_ms)),
      el('td', {}, t.held_reason || '')));
  const recovery = Number(status.recovery_total) ?
      status.recovery_done + ' / ' + status.recovery_total : 'none';
  setView(
      el('h1', {}, 'Overview'),
      el('div', {class: 'cards'},
          card('health', status.health, 'card-health'),
          card('version', status.version, 'card-version'),
          card('recovery (done / found)', recovery, 'card-recovery'),
          card('stuck branches', status.stuck_branches, 'card-stuck'),
          card('oldest unfinished', Number(status.oldest_unfinished_age_ms) ?
              Math.round(Number(status.oldest_unfinished_age_ms) / 1000) + ' s' : 'none',
              'card-oldest'),
          card('WAL on disk', (Number(status.wal_bytes) / 1048576).toFixed(1) + ' MiB', 'card-wal')),
      status.recovery_error ? el('p', {class: 'error'}, 'Recovery failed: ' + status.recovery_error) : null,
      el('h2', {}, 'In flight by state'),
      table('in-flight', UNFINISHED, [el('tr', {}, UNFINISHED.map(s => el('td', {'data-state': s}, counts[s] || 0)))], ''),
      el('h2', {}, 'Stuck branches'),
      table('stuck', ['gid', 'branch', 'participant', 'state', 'attempts', 'last error'],
          stuckRows, 'No branch is stuck.'),
      el('h2', {}, 'Oldest unfinished transactions'),
      table('oldest', ['gid', 'state', 'age', 'held'], oldestRows,
          'Nothing is in flight.'));
}

function phaseCell(p) {
  if (!p) return '';
  const s = short(p.state, 'PHASE_STATE_');
  const o = short(p.outcome, 'OUTCOME_');
  return (o && o !== 'unspecified' ? o : s) + (p.attempts > 1 ? ' (' + p.attempts + ' attempts)' : '');
}

function renderTxn(show) {
  const t = show.transaction;
  setHealth(document.getElementById('health').textContent);
  const branches = (t.branches || []).map(b => el('tr', {class: b.stuck ? 'stuck-row' : ''},
      el('td', {class: 'mono'}, b.branch_id), el('td', {}, b.participant),
      el('td', {}, b.action), el('td', {}, phaseCell(b.try_phase)),
      el('td', {}, phaseCell(b.second_phase)), el('td', {}, b.stuck ? badge('STUCK', 'bad') : ''),
      el('td', {class: 'mono'}, (b.second_phase && b.second_phase.last_error) ||
          (b.try_phase && b.try_phase.last_error) || '')));
  const timeline = (show.timeline || []).map(r => el('tr', {},
      el('td', {class: 'mono'}, when(r.at_ms)), el('td', {}, r.kind),
      el('td', {class: 'mono'}, r.branch_id), el('td', {}, r.summary),
      el('td', {class: 'mono'}, r.approval_id)));
  const approvals = (show.approvals || []).map(a => el('tr', {},
      el('td', {class: 'mono'}, a.approval_id), el('td', {}, short(a.action, 'APPROVAL_ACTION_')),
      el('td', {}, a.issued_by), el('td', {}, a.reason), el('td', {class: 'mono'}, when(a.used_at_ms))));
  setView(
      el('h1', {}, 'Transaction ', el('span', {class: 'mono', id: 'txn-gid'}, t.gid)),
      el('div', {class: 'cards'},
          card('state', stateBadge(t.state), 'txn-state'),
          card('decision', short(t.decision, 'DECISION_') || 'none', 'txn-decision'),
          card('cause', short(t.decision_cause, 'DECISION_CAUSE_'), 'txn-cause'),
          card('revision', t.revision, 'txn-revision'),
          card('registered', age(t.registered_at_ms) + ' ago', 'txn-age')),
      t.held_reason ? el('p', {class: 'error', id: 'txn-held'}, 'Held for an operator: ' + t.held_reason) : null,
      el('p', {}, 'Content hash ', el('span', {class: 'mono'}, hex(t.content_hash)),
          t.decision_reason ? ' · ' + t.decision_reason : ''),
      el('h2', {}, 'Branches'),
      table('branches', ['branch', 'participant', 'action', 'try', 'confirm/cancel', '', 'last error'],
          branches, 'No branches.'),
      el('h2', {}, 'Record timeline'),
      table('timeline', ['at (UTC)', 'record', 'branch', 'summary', 'approval'], timeline,
          'No records kept (compacted by retention).'),
      el('h2', {}, 'Approvals consumed'),
      table('approvals', ['approval', 'action', 'issued by', 'reason', 'used at'], approvals,
          'None.'),
      el('p', {id: 'live', class: 'empty'}, FINAL.includes(t.state) ? 'Final.' : 'Live: updates as it moves.'));
}

async function transaction(gid) {
  const show = await api('/api/show?gid=' + encodeURIComponent(gid));
  renderTxn(show);
  if (FINAL.includes(show.transaction.state)) return;
  // Live: each change re-reads Show (the timeline grows with it).
  watch = new EventSource('/api/watch?gid=' + encodeURIComponent(gid));
  watch.onmessage = async (m) => {
    const ev = JSON.parse(m.data);
    const next = await api('/api/show?gid=' + encodeURIComponent(gid));
    renderTxn(next);
    if (FINAL.includes(ev.transaction.state) && watch) { watch.close(); watch = null; }
  };
}

async function route() {
  if (refreshTimer) { clearInterval(refreshTimer); refreshTimer = null; }
  if (watch) { watch.close(); watch = null; }
  const hash = window.location.hash || '#/';
  try {
    if (hash.startsWith('#/txn/')) {
      await transaction(decodeURIComponent(hash.slice(6)));
    } else {
      await overview();
      refreshTimer = setInterval(() => overview().catch(showError), 3000);
    }
  } catch (e) { showError(e); }
}

function showError(e) {
  setView(el('p', {class: 'error', id: 'error'}, String(e.message || e)));
}

document.getElementById('search').addEventListener('submit', (e) => {
  e.preventDefault();
  const gid = document.getElementById('search-gid').value.trim();
  if (gid) window.location.hash = '#/txn/' + encodeURIComponent(gid);
});
window.addEventListener('hashchange', route);
route();
