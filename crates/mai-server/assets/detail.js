// Task detail: the task's facts, its controls (cancel, pause, resume, inject an instruction,
// answer its question) and the timeline of its whole life — status changes with actor and
// reason, each round (the model's text, each tool call with its arguments, result and duration,
// sub-agent calls nested under their round), questions and answers, injected instructions, the
// reply parts sent — and its usage and cost when the server records them. It reloads (at most
// twice a second) when one of its events, or one of the tasks it made, arrives — a `created`
// event naming it as the parent included — and after missed events; what a person types into
// the answer and inject boxes, and the focus, survive the reload. The latest live event shows
// above the timeline.

import { api, allTasks, failed, PAUSABLE } from './api.js';
import { h, put, putKeeping, badge, when, relative, taskLink, triggerText, notice, throttle, latest, twoStep } from './dom.js';

const SUBAGENT_TOOLS = ['ask_subagent', 'ask_subagents'];

export function render(main, id) {
  const head = h('div');
  const controls = h('section', { class: 'card controls', 'aria-label': 'Controls' });
  const messages = h('div', { id: 'detail-messages' });
  // A failed read (kept apart from the answers to the controls, which a reload must not wipe).
  const problems = h('div');
  const now = h('p', { class: 'live-line muted', role: 'status' });
  const usage = h('div');
  const timeline = h('ol', { class: 'timeline', id: 'timeline' });
  const replies = h('div');
  put(main, head, problems, messages, controls, usage, h('h2', {}, 'Timeline'), now, timeline, replies);

  let task = null;
  // The tasks this one made (sub-tasks, reply tasks): their events reload the page too.
  let children = new Set();
  // Cancel asks first; whether it was pressed once survives the redraws of live updates.
  const confirm = twoStep();
  const load = latest(async (current) => {
    try {
      const [history, made, record] = await Promise.all([
        api(`/v1/tasks/${encodeURIComponent(id)}/history`),
        allTasks({ parent: id }),
        api(`/v1/tasks/${encodeURIComponent(id)}`),
      ]);
      if (!current()) return;
      task = history.task;
      put(problems);
      showHead(head, task);
      showControls(controls, task, act, confirm);
      showUsage(usage, record.usage ?? task.usage);
      putKeeping(timeline, buildTimeline(history));
      children = new Set(made.map((t) => t.id));
      showChildren(replies, made);
    } catch (error) {
      if (current()) failed(error, put(problems));
    }
  });

  async function act(path, body, done) {
    put(messages);
    try {
      const answer = await api(`/v1/tasks/${encodeURIComponent(task.id)}/${path}`, { method: 'POST', body });
      put(messages, notice(done(answer), 'ok'));
      // Sent: the boxes start empty again (a reload keeps only what is still being typed).
      for (const box of controls.querySelectorAll('textarea')) box.value = '';
      await load();
    } catch (error) {
      failed(error, messages);
    }
  }

  const reload = throttle(load, 500);
  load();
  return {
    onEvent(name, data) {
      // Not read yet (the first read failed): any event is a reason to try again.
      if (!task) {
        reload();
        return;
      }
      if (data.task_id === task.id) {
        now.textContent = liveText(name, data);
        reload();
      } else if (children.has(data.task_id) || (name === 'created' && data.parent_task_id === task.id)) {
        reload();
      }
    },
    resync: reload,
    dispose: () => {
      reload.cancel();
      confirm.dispose();
    },
  };
}

function liveText(name, data) {
  switch (name) {
    case 'round': return `Now: round ${data.round} started`;
    case 'tool_call': return `Now: round ${data.round} calls ${data.tool}`;
    case 'tool_result': return `Now: ${data.tool} ${data.ok ? 'answered' : 'failed'}`;
    case 'question': return 'Now: waiting for an answer';
    case 'status': return `Now: ${data.status.replace('_', ' ')} (${data.reason})`;
    case 'sent': return `Now: a message went to ${data.stream_id}`;
    case 'changed': return `Now: ${data.status.replace('_', ' ')} (changed through the shared store)`;
    default: return `Now: ${name}`;
  }
}

function fact(label, value) {
  return [h('dt', {}, label), h('dd', {}, value)];
}

function showHead(head, task) {
  const m = task.metadata || {};
  putKeeping(head,
    h('p', { class: 'crumbs' }, h('a', { href: '#/tasks', id: 'crumb-tasks' }, 'Tasks'), ' / ', task.short_id),
    h('h1', { id: 'task-title' }, task.title, ' ', badge(task.status)),
    h('section', { class: 'card' },
      h('h2', {}, 'Intent'),
      h('p', { class: 'text', id: 'task-intent' }, task.intent),
      m.answer ? [h('h2', {}, 'Answer'), h('p', { class: 'text', id: 'task-answer' }, m.answer)] : null,
      m.error ? [h('h2', {}, 'Error'), h('p', { class: 'text error' }, m.error)] : null,
      h('dl', { class: 'facts wide' },
        fact('Id', task.id),
        fact('Owner', task.owner),
        fact('Acts for', m.requester || '—'),
        fact('Stream', task.stream_id),
        task.reply_stream_id ? fact('Replies to', task.reply_stream_id) : null,
        fact('Level', task.level),
        fact('Trigger', triggerText(task.trigger)),
        fact('Priority', String(task.priority)),
        fact('Created', when(task.created_at)),
        fact('Started', when(task.started_at)),
        task.status === 'scheduled' ? fact('Next run', `${when(task.scheduled_at)} (${relative(task.scheduled_at)})`) : null,
        fact('Rounds', String(m.rounds || 0)),
        fact('Running time', `${m.runtime_secs || 0} s`),
        m.parent_task_id ? fact('Made by', h('a', { href: `#/task/${encodeURIComponent(m.parent_task_id)}`, id: 'made-by' }, m.parent_task_id.slice(0, 8))) : null)));
}

function showControls(controls, task, act, confirm) {
  const s = task.status;
  const button = (label, id, enabled, onclick) => h('button', { type: 'button', id, disabled: !enabled, onclick }, label);
  const parts = [h('h2', {}, 'Controls'), h('div', { class: 'actions' },
    // Two steps, so a stray click or key press does not cancel: the button asks first.
    confirm({ id: 'cancel', disabled: !(PAUSABLE.includes(s) || s === 'paused') }, 'Cancel', 'Really cancel?',
      () => act('cancel', undefined, (a) => (a.stopping ? 'Stopping at its next step…' : 'Cancelled.'))),
    button('Pause', 'pause', PAUSABLE.includes(s), () => act('pause', undefined, (a) => (a.stopping ? 'Pausing at its next step…' : 'Paused.'))),
    button('Resume', 'resume', s === 'paused', () => act('resume', undefined, (a) => (a.task.status === 'scheduled' ? 'Resumed: it waits for its time again.' : 'Resumed: queued again.'))))];
  const question = task.metadata?.waiting?.question;
  if (s === 'waiting_input' && question) {
    const text = h('textarea', { id: 'answer-text', rows: 2, required: true, maxlength: 8000 });
    parts.push(h('form', { class: 'answer', onsubmit: (e) => {
      e.preventDefault();
      act('answer', { text: text.value }, () => 'Answered: the task resumes.');
    } },
    h('h3', {}, 'Its question'), h('p', { class: 'text question' }, question),
    h('label', { for: 'answer-text' }, 'Answer'), text, h('button', { type: 'submit', id: 'answer' }, 'Send the answer')));
  }
  if (task.level === 'agent' && ['running', 'pending', 'waiting_input'].includes(s)) {
    const text = h('textarea', { id: 'inject-text', rows: 2, required: true, maxlength: 8000 });
    parts.push(h('form', { class: 'inject', onsubmit: (e) => {
      e.preventDefault();
      act('inject', { instruction: text.value }, (a) => (a.answered ? 'Taken as the answer.' : 'Instruction added: read before its next model call.'));
    } },
    h('label', { for: 'inject-text' }, 'Add an instruction'), text, h('button', { type: 'submit', id: 'inject' }, 'Inject')));
  }
  putKeeping(controls, parts);
}

/** Usage and cost, when the server records them (`usage` in `GET /v1/tasks/{id}`): every
 *  figure, nested ones as `outer · inner`. */
function showUsage(where, usage) {
  if (!usage || typeof usage !== 'object') {
    put(where);
    return;
  }
  const rows = [];
  const walk = (prefix, value) => {
    if (value !== null && typeof value === 'object') {
      for (const [k, v] of Object.entries(value)) walk(prefix ? `${prefix} · ${k}` : k, v);
    } else {
      rows.push([prefix.replace(/_/g, ' '), value === null ? '—' : String(value)]);
    }
  };
  walk('', usage);
  put(where, h('section', { class: 'card', id: 'usage' }, h('h2', {}, 'Usage and cost'),
    h('dl', { class: 'facts wide' }, rows.map(([k, v]) => fact(k, v)))));
}

function pretty(value) {
  if (typeof value === 'string') {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  return JSON.stringify(value, null, 2);
}

function ms(from, to) {
  const d = new Date(to) - new Date(from);
  if (!Number.isFinite(d) || d < 0) return '';
  return d < 1000 ? `${d} ms` : `${(d / 1000).toFixed(1)} s`;
}

/** The timeline: status lines and rounds, in time order. */
function buildTimeline(history) {
  const items = history.status_log.map((line) => ({
    at: line.at,
    node: h('li', { class: 'ev status-line' },
      h('time', {}, when(line.at)), ' ', badge(line.status), ' ',
      h('span', { class: 'actor' }, line.actor), ' — ', h('span', {}, line.reason)),
  }));
  const rounds = new Map();
  for (const entry of history.entries) {
    if (!rounds.has(entry.round)) rounds.set(entry.round, []);
    rounds.get(entry.round).push(entry);
  }
  // The first user message of the conversation is the intent; later ones are messages.
  const first = history.entries.find((e) => e.kind === 'message' && e.payload?.role === 'user');
  for (const [round, entries] of rounds) items.push({ at: entries[0].at, node: roundNode(round, entries, first) });
  items.sort((a, b) => new Date(a.at) - new Date(b.at));
  return items.length ? items.map((i) => i.node) : h('li', { class: 'empty' }, 'Nothing yet.');
}

function roundNode(round, entries, intent) {
  const results = new Map();
  for (const e of entries) {
    if (e.kind === 'message' && e.payload?.role === 'tool') results.set(e.payload.tool_call_id, e);
  }
  const body = [];
  // Stable ids (round and place in it), so a redraw keeps what the person opened or closed.
  for (const [n, e] of entries.entries()) {
    const p = e.payload || {};
    const fold = `fold-${round}-${n}`;
    if (e.kind === 'injection') {
      body.push(h('div', { class: 'ev injection' }, h('b', {}, 'Instruction injected'), h('p', { class: 'text' }, p.content ?? '')));
    } else if (e.kind === 'note') {
      body.push(h('div', { class: 'ev note' }, h('b', {}, 'Note'), h('p', { class: 'text' }, p.content ?? pretty(p))));
    } else if (p.role === 'system') {
      body.push(h('details', { class: 'ev', id: fold }, h('summary', {}, 'System prompt'), h('pre', {}, p.content ?? '')));
    } else if (p.role === 'user') {
      body.push(h('div', { class: 'ev user' }, h('b', {}, e === intent ? 'Intent' : 'Message'), h('p', { class: 'text' }, p.content ?? '')));
    } else if (p.role === 'assistant') {
      if (p.reasoning_content) body.push(h('details', { class: 'ev', id: `${fold}-reasoning` }, h('summary', {}, 'Reasoning'), h('pre', {}, p.reasoning_content)));
      if (p.content) body.push(h('div', { class: 'ev model' }, h('b', {}, 'Model'), h('p', { class: 'text' }, p.content)));
      for (const [c, call] of (p.tool_calls || []).entries()) body.push(callNode(call, e, results.get(call.id), `${fold}-call-${c}`));
    }
  }
  return h('li', { class: 'ev round' }, h('h3', {}, round === 0 ? 'Start' : `Round ${round}`, ' ', h('time', {}, when(entries[0].at))), body);
}

function callNode(call, asked, result, fold) {
  const output = result ? result.payload.content ?? '' : null;
  const took = result ? ms(asked.at, result.at) : '';
  if (call.name === 'ask_user') {
    const args = typeof call.arguments === 'object' ? call.arguments : {};
    let answer = null;
    try {
      const parsed = JSON.parse(output ?? 'null');
      answer = parsed?.answer ?? (parsed?.timed_out ? 'no answer (timed out)' : null);
    } catch {
      answer = output;
    }
    return h('div', { class: 'ev qa' },
      h('b', {}, 'Question'), h('p', { class: 'text question' }, args.question ?? pretty(call.arguments)),
      h('b', {}, 'Answer'), h('p', { class: 'text' }, answer ?? (result ? output : 'waiting…')));
  }
  const nested = SUBAGENT_TOOLS.includes(call.name);
  return h('details', { class: `ev call${nested ? ' subagent' : ''}`, id: fold, open: true },
    h('summary', {}, h('code', {}, call.name), nested ? ' (sub-agents)' : '', took ? ` · ${took}` : '', result ? '' : ' · no result yet'),
    h('div', { class: nested ? 'nested' : '' },
      h('b', {}, 'Arguments'), h('pre', {}, pretty(call.arguments)),
      output !== null ? [h('b', {}, 'Result'), h('pre', {}, pretty(output))] : null));
}

function showChildren(where, children) {
  if (!children.length) {
    put(where);
    return;
  }
  const replies = children.filter((t) => t.metadata?.is_reply);
  const subtasks = children.filter((t) => !t.metadata?.is_reply);
  putKeeping(where,
    replies.length ? h('section', { class: 'card', id: 'replies' }, h('h2', {}, 'Reply parts'),
      replies.map((r) => {
        const d = r.metadata.delivery || { parts: [], sent: 0 };
        return h('div', { class: 'reply' },
          h('p', {}, taskLink(r, `reply ${r.short_id}`), ' ', badge(r.status), ` to ${r.stream_id}: ${d.sent} of ${d.parts.length} part(s) sent`),
          h('ol', {}, d.parts.map((part, i) => h('li', { class: i < d.sent ? 'sent' : 'unsent' }, h('span', { class: 'text' }, part)))));
      })) : null,
    subtasks.length ? h('section', { class: 'card' }, h('h2', {}, 'Sub-tasks'),
      h('ul', {}, subtasks.map((t) => h('li', {}, taskLink(t), ' ', badge(t.status))))) : null);
}
