// The status page: polls api/state every second and redraws. Everything
// that comes from the agent enters the DOM as text (textContent, Text
// nodes), never as markup.
'use strict';

(function () {
  const pollMs = 1000;
  // The handler gives its source 3 s (ui/handler.go, stateTimeout).
  const answerTimeoutMs = 4000;
  // Past this without a good answer the page stops calling itself live.
  const staleAfterMs = 3000;

  let prev = null; // the last good state, for rates
  let lastOkAt = 0; // Date.now() of the last good answer
  let failure = null; // {since, message} while the agent does not answer

  // el builds an element; children are nodes or strings (Text nodes).
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c !== null && c !== undefined) e.append(c);
    }
    return e;
  }

  function setText(id, text, bad) {
    const e = document.getElementById(id);
    e.textContent = text;
    if (bad !== undefined) e.classList.toggle('bad', bad);
  }

  const dash = '–';

  function fmtInt(n) {
    return n === null || n === undefined ? dash : n.toLocaleString('en-US');
  }

  function fmtRate(r) {
    if (r === null || r === undefined) return dash;
    return r < 10 ? r.toFixed(1) : Math.round(r).toLocaleString('en-US');
  }

  function fmtBytesRate(r) {
    if (r === null || r === undefined) return dash;
    const units = ['B/s', 'KiB/s', 'MiB/s', 'GiB/s'];
    let i = 0;
    while (r >= 1024 && i < units.length - 1) {
      r /= 1024;
      i++;
    }
    return (r < 10 && i > 0 ? r.toFixed(1) : Math.round(r).toString()) + ' ' + units[i];
  }

  function fmtBytes(n) {
    return n === null || n === undefined ? dash : fmtBytesRate(n).replace('/s', '');
  }

  function fmtClock(ms) {
    return new Date(ms).toLocaleTimeString('en-GB');
  }

  function partitionKey(topic, p) {
    return topic + '\u0000' + p.partition;
  }

  // rates compares st with the state before it: records/s per partition
  // from LEO changes, the agent's byte rates from its counters. A value
  // that went down (a log truncated, the agent restarted) has no rate.
  function rates(st) {
    const out = { partitions: new Map(), produce: null, produceBytes: null, fetchBytes: null };
    if (prev === null) return out;
    const dt = (st.time_unix_ms - prev.time_unix_ms) / 1000;
    if (!(dt > 0)) return out;
    const before = new Map();
    for (const t of prev.topics) {
      for (const p of t.partitions) before.set(partitionKey(t.name, p), p.log_end_offset);
    }
    let sum = 0;
    let any = false;
    for (const t of st.topics) {
      for (const p of t.partitions) {
        const b = before.get(partitionKey(t.name, p));
        if (p.log_end_offset === null || b === null || b === undefined || p.log_end_offset < b) continue;
        const r = (p.log_end_offset - b) / dt;
        out.partitions.set(partitionKey(t.name, p), r);
        sum += r;
        any = true;
      }
    }
    if (any) out.produce = sum;
    const c = st.counters;
    const pc = prev.counters;
    if (c && pc) {
      if (c.produce_bytes >= pc.produce_bytes) out.produceBytes = (c.produce_bytes - pc.produce_bytes) / dt;
      if (c.fetch_bytes >= pc.fetch_bytes) out.fetchBytes = (c.fetch_bytes - pc.fetch_bytes) / dt;
    }
    return out;
  }

  function agentCard(a, st, builds) {
    let leads = 0;
    let holds = 0;
    for (const t of st.topics) {
      for (const p of t.partitions) {
        if (p.leader === a.node_id) leads++;
        if (p.replicas.includes(a.node_id)) holds++;
      }
    }
    return el('div', {
      class: 'agent ' + (a.up ? 'up' : 'down') + (a.draining ? ' draining' : ''),
      'data-node': a.node_id, 'data-up': String(a.up), 'data-draining': String(a.draining), 'data-not-passing': String(a.not_passing),
      'data-version': a.version,
    },
      el('div', { class: 'top' },
        el('span', { class: 'node' }, a.node_id,
          a.node_id === st.self.node_id ? el('span', { class: 'you', text: 'this agent' }) : null),
        el('span', {},
          a.draining ? el('span', { class: 'badge drain', title: 'logagent node drain: its replicas move away', text: 'DRAINING' }) : null,
          a.not_passing ? el('span', { class: 'badge drain', title: 'a Consul check not passing (maintenance mode, a warning): it serves, and takes no new replica', text: 'NOT PASSING' }) : null,
          el('span', { class: 'badge', text: a.up ? 'UP' : 'DOWN' }))),
      el('div', { class: 'addr', text: 'client ' + (a.client_address || dash) + '  ·  peer ' + (a.peer_address || dash) }),
      el('div', { class: 'load', text: 'leads ' + leads + ' · replica of ' + holds }),
      buildLine(a, builds));
  }

  // runningBuilds counts the builds the agents up run (one that registered
  // none counts as one more).
  function runningBuilds(agents) {
    return new Set(agents.filter((a) => a.up).map((a) => a.version || '?')).size;
  }

  // buildLine names the agent's build, marked while the agents up run more
  // than one (a rolling upgrade under way, or one left behind).
  function buildLine(a, builds) {
    const mixed = builds > 1;
    return el('div', {
      class: 'build' + (mixed ? ' mixed' : ''),
      title: mixed ? 'the agents up run ' + builds + ' builds (logagent version): a rolling upgrade under way, or one left behind' : 'the build the agent registered (logagent version)',
      text: 'build ' + (a.version || dash),
    });
  }

  function partitionStatus(t, p) {
    if (p.offline) return ['offline: no leader up', 'bad'];
    if (p.under_min_isr) return ['under min ISR', 'bad'];
    if (p.under_replicated) {
      const before = p.replicas.length - (p.move ? p.move.adding.length : 0);
      return [before < t.replication_factor ? 'under-replicated: ' + before + ' of RF ' + t.replication_factor : 'under-replicated', 'warn'];
    }
    if (p.move) return ['moving', 'warn'];
    if (p.leader_not_preferred) return ['leader not preferred', 'warn'];
    return ['ok', 'ok'];
  }

  // moveCell is a move in flight: its target, its phase (design.md §7.6)
  // and each added replica's catch-up, which only the leader knows.
  function moveCell(p) {
    const m = p.move;
    if (!m) return el('td', { class: 'move none', text: dash });
    const cell = el('td', { class: 'move', 'data-phase': m.phase, 'data-target': m.target.join(',') },
      el('span', { class: 'target', text: '→ ' + m.target.join(',') }),
      el('span', { class: 'phase', title: 'adding: the new replicas catch up; leader-off: the leader hands over; completing: the last transaction; cancelling: back to the original replicas', text: m.phase }));
    for (const r of m.progress) {
      const pct = r.caught_up === null ? null : Math.floor(r.caught_up * 100);
      const bar = el('span', { class: 'bar', title: r.node + ': log end ' + r.log_end_offset + ', lag ' + r.lag + ', ' + fmtBytes(r.catch_up_bytes) + ' sent' },
        el('span', { class: 'fill' }));
      bar.firstChild.style.width = (pct === null ? 0 : pct) + '%';
      cell.append(el('span', { class: 'progress', 'data-node': r.node },
        r.node + ' ', bar, ' ' + (r.in_sync ? 'in sync' : pct === null ? '?' : pct + '%') + ' · ' + fmtBytes(r.catch_up_bytes)));
    }
    if (m.progress.length === 0 && m.adding.length > 0) {
      cell.append(el('span', { class: 'progress none', text: 'progress on the leader\'s page' }));
    }
    return cell;
  }

  function partitionRow(t, p, up, r) {
    const cls = p.offline ? 'offline' : p.under_min_isr ? 'minisr' : p.under_replicated ? 'under' : p.move ? 'moving' : '';
    const replicas = el('td', { class: 'replicas' });
    for (const n of p.replicas) {
      const inISR = p.isr.includes(n);
      const c = ['replica', inISR ? 'in' : 'out'];
      if (n === p.leader) c.push('leader');
      if (!up.get(n)) c.push('down');
      const title = (n === p.leader ? 'leader; ' : '') + (inISR ? 'in the ISR' : 'not in the ISR') + (up.get(n) ? '' : '; agent down');
      replicas.append(el('span', { class: c.join(' '), 'data-node': n, 'data-in-isr': String(inISR), title: title, text: n }));
    }
    replicas.append(el('span', { class: 'isr-count', text: 'ISR ' + p.isr.length + '/' + p.replicas.length }));
    const leader = p.leader === ''
      ? el('td', { class: 'leader none', text: 'none' })
      : el('td', { class: 'leader' + (up.get(p.leader) ? '' : ' leader-down'), text: p.leader + (up.get(p.leader) ? '' : ' (down)') });
    const [status, statusClass] = partitionStatus(t, p);
    return el('tr', {
      class: cls, 'data-topic': t.name, 'data-partition': String(p.partition),
      'data-leader': p.leader, 'data-isr': p.isr.join(','),
    },
    el('td', { class: 'num', text: String(p.partition) }),
    leader,
    el('td', { class: 'num', text: String(p.epoch) }),
    replicas,
    el('td', { class: 'num', text: fmtInt(p.high_watermark) }),
    el('td', { class: 'num', text: fmtInt(p.log_end_offset) }),
    el('td', { class: 'num', text: fmtInt(p.log_start_offset) }),
    el('td', { class: 'num', text: fmtInt(p.lag) }),
    el('td', { class: 'num', text: fmtRate(r) }),
    el('td', { class: 'status ' + statusClass, text: status }),
    moveCell(p));
  }

  function topicSection(t, up, rs) {
    const under = t.partitions.filter((p) => p.under_replicated).length;
    const offline = t.partitions.filter((p) => p.offline).length;
    const moving = t.partitions.filter((p) => p.move).length;
    const h = el('h2', {}, t.name,
      el('span', { class: 'meta', text: t.partitions.length + ' partitions · RF ' + t.replication_factor + ' · min ISR ' + t.min_insync_replicas }),
      under > 0 ? el('span', { class: 'flag', text: under + ' under-replicated' }) : null,
      offline > 0 ? el('span', { class: 'flag bad', text: offline + ' offline' }) : null,
      moving > 0 ? el('span', { class: 'flag', text: moving + ' moving' }) : null,
      t.error ? el('span', { class: 'flag bad', text: 'corrupt metadata: ' + t.error }) : null);
    const head = el('tr', {},
      el('th', { class: 'num', text: 'Partition' }), el('th', { text: 'Leader' }), el('th', { class: 'num', text: 'Epoch' }),
      el('th', { text: 'Replicas (ISR)' }), el('th', { class: 'num', text: 'HW' }), el('th', { class: 'num', text: 'LEO' }),
      el('th', { class: 'num', text: 'Log start' }), el('th', { class: 'num', text: 'Lag' }),
      el('th', { class: 'num', text: 'Records/s' }), el('th', { text: 'Status' }), el('th', { text: 'Move' }));
    const body = el('tbody', {});
    for (const p of t.partitions) body.append(partitionRow(t, p, up, rs.partitions.get(partitionKey(t.name, p))));
    return el('section', { class: 'topic', 'data-topic': t.name }, h, el('table', {}, el('thead', {}, head), body));
  }

  function render(st) {
    const rs = rates(st);
    const up = new Map(st.agents.map((a) => [a.node_id, a.up]));
    const self = document.getElementById('self');
    self.textContent = st.self.node_id + ' · ' + st.self.state;
    self.classList.toggle('not-serving', st.self.state !== 'serving');
    document.title = 'logagent ' + st.self.node_id + ': ' + st.totals.agents_up + '/' + st.agents.length + ' up, ' +
      st.totals.under_replicated + ' under-replicated';
    const tt = st.totals;
    setText('t-agents', tt.agents_up + ' / ' + st.agents.length, tt.agents_down > 0);
    setText('t-partitions', fmtInt(tt.partitions));
    setText('t-under', fmtInt(tt.under_replicated), tt.under_replicated > 0);
    setText('t-minisr', fmtInt(tt.under_min_isr), tt.under_min_isr > 0);
    setText('t-offline', fmtInt(tt.offline), tt.offline > 0);
    setText('t-moving', fmtInt(tt.moving));
    setText('t-draining', fmtInt(tt.agents_draining));
    setText('t-produce', fmtRate(rs.produce) + ' rec/s');
    setText('t-produce-bytes', fmtBytesRate(rs.produceBytes));
    setText('t-fetch-bytes', fmtBytesRate(rs.fetchBytes));
    const builds = runningBuilds(st.agents);
    document.getElementById('agents').replaceChildren(...st.agents.map((a) => agentCard(a, st, builds)));
    const topics = st.topics.map((t) => topicSection(t, up, rs));
    if (topics.length === 0) topics.push(el('p', { class: 'none', text: 'No topics.' }));
    document.getElementById('topics').replaceChildren(...topics);
    document.getElementById('warnings').replaceChildren(...st.warnings.map((w) => el('li', { text: w })));
  }

  // tick shows how old the data is, and says so loudly once it is not live.
  function tick() {
    const now = Date.now();
    const updated = document.getElementById('updated');
    const banner = document.getElementById('banner');
    const late = lastOkAt === 0 || now - lastOkAt > staleAfterMs || failure !== null;
    updated.classList.toggle('late', late && lastOkAt !== 0);
    const age = Math.floor((now - lastOkAt) / 1000) + ' s ago';
    if (lastOkAt === 0) updated.textContent = 'not updated yet';
    else updated.textContent = failure === null ? 'updated ' + age : 'no answer · last update ' + age;
    // The last data stays for reference, greyed out, header included.
    document.getElementById('main').classList.toggle('stale', late && lastOkAt !== 0);
    document.getElementById('totals').classList.toggle('stale', late && lastOkAt !== 0);
    if (failure !== null && prev !== null) {
      const self = document.getElementById('self');
      self.textContent = prev.self.node_id + ' · not answering';
      self.classList.add('not-serving');
    }
    if (failure === null && !late) {
      banner.hidden = true;
      return;
    }
    let text;
    if (failure !== null) {
      text = 'This agent is not answering since ' + fmtClock(failure.since) + ' (' + failure.message + ').';
    } else {
      text = 'No answer from this agent for ' + Math.floor((now - lastOkAt) / 1000) + ' s.';
    }
    text += lastOkAt === 0 ? ' Nothing to show yet.' : ' What follows is as of ' + fmtClock(lastOkAt) + ', not live.';
    banner.textContent = text;
    banner.hidden = false;
  }

  // The client token, when the agent wants one (client.token_file): asked
  // for once the state answers 401, kept for this tab only.
  const tokenKey = 'logagent-token';
  const tokenForm = document.getElementById('token-form');
  tokenForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = document.getElementById('token');
    sessionStorage.setItem(tokenKey, input.value.trim());
    input.value = '';
    tokenForm.hidden = true;
  });

  async function poll() {
    const started = Date.now();
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), answerTimeoutMs);
    try {
      const headers = {};
      const token = sessionStorage.getItem(tokenKey);
      if (token) headers.Authorization = 'Bearer ' + token;
      const resp = await fetch('api/state', { cache: 'no-store', signal: ctl.signal, headers: headers });
      tokenForm.hidden = resp.status !== 401;
      if (!resp.ok) {
        let message = 'HTTP ' + resp.status;
        try {
          const body = await resp.json();
          if (body && body.error) message += ': ' + body.error.message;
        } catch (_) {
          // not the API's JSON error: the status says enough
        }
        throw new Error(message);
      }
      const st = await resp.json();
      render(st);
      prev = st;
      lastOkAt = Date.now();
      failure = null;
    } catch (e) {
      let message = String(e.message || e);
      if (e.name === 'AbortError') message = 'no answer within ' + answerTimeoutMs / 1000 + ' s';
      else if (e instanceof TypeError) message = 'cannot connect: ' + message;
      if (failure === null) failure = { since: started, message: message };
      else failure.message = message;
    } finally {
      clearTimeout(timer);
      tick();
      setTimeout(poll, Math.max(0, pollMs - (Date.now() - started)));
    }
  }

  setInterval(tick, 250);
  poll();
})();
