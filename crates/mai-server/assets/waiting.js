// Waiting for people: every task in `waiting_input`, the longest-waiting first, with its
// question, whom it waits for, the recent messages of its chat, and a form to answer it in place
// (sent with `X-Mai-Client: dashboard`, so the resume's status-log line names the dashboard).
// The list reloads (at most twice a second) as tasks start or stop waiting, and after missed
// events; an answer being typed, and the focus, survive the reload (each box's id is its
// task's). A card's chat is read when it is first opened and kept: a reload reads no chat
// again, only a new question of the task does.

import { api, allTasks, failed } from './api.js';
import { h, put, putKeeping, when, relative, taskLink, notice, throttle, latest } from './dom.js';

/** How long a chat read is shown again without reading it anew. */
const FRESH_MS = 30000;

export function render(main) {
  const list = h('div', { class: 'cards', id: 'waiting-list' });
  const messages = h('div');
  put(main, h('h1', {}, 'Waiting for people'),
    h('p', { class: 'muted' }, 'Tasks that asked a question and wait for its answer, the longest-waiting first.'),
    messages, list);

  const chats = chatCache();
  const load = latest(async (current) => {
    try {
      const tasks = await allTasks({ status: 'waiting_input', order: 'oldest' });
      if (!current()) return;
      chats.keepOnly(new Set(tasks.map((t) => t.id)));
      const since = (t) => t.metadata?.waiting?.asked_at || t.updated_at;
      tasks.sort((a, b) => new Date(since(a)) - new Date(since(b)));
      put(messages);
      putKeeping(list, tasks.length ? tasks.map((t) => card(t, since(t), chats)) : h('p', { class: 'empty' }, 'Nobody is being waited for.'));
    } catch (error) {
      if (current()) failed(error, put(messages));
    }
  });

  const reload = throttle(load, 500);
  load();
  return {
    onEvent(name) {
      if (name === 'status' || name === 'question' || name === 'created' || name === 'changed') reload();
    },
    resync: reload,
    dispose: reload.cancel,
  };
}

function card(task, since, chats) {
  const chat = h('ol', { class: 'chat' }, h('li', { class: 'muted' }, 'loading the chat…'));
  // Stays open across reloads once opened; its messages are read on opening (or from the cache).
  const details = h('details', { id: `chat-${task.id}` }, h('summary', {}, 'Recent messages in this chat'), chat);
  details.addEventListener('toggle', () => {
    if (details.open) chats.show(task, chat);
  });
  const text = h('textarea', { id: `answer-${task.id}`, rows: 2, required: true, maxlength: 8000, 'aria-label': 'Answer' });
  const status = h('div');
  const button = h('button', { type: 'submit', id: `send-${task.id}` }, 'Answer');
  const form = h('form', { class: 'answer', onsubmit: async (event) => {
    event.preventDefault();
    button.disabled = true;
    put(status);
    try {
      await api(`/v1/tasks/${encodeURIComponent(task.id)}/answer`, { method: 'POST', body: { text: text.value } });
      put(status, notice('Answered: the task resumes.', 'ok'));
      // Emptied, so a question the task asks next does not come back with this answer in it.
      text.value = '';
      text.disabled = true;
    } catch (error) {
      button.disabled = false;
      failed(error, status);
    }
  } }, text, button, status);
  return h('article', { class: 'card waiting' },
    h('h2', {}, taskLink(task), ' ', h('small', { class: 'id' }, task.short_id)),
    h('p', { class: 'muted' }, `waits for ${task.metadata?.requester || task.owner} in ${task.stream_id} since ${when(since)} (${relative(since)})`),
    h('p', { class: 'text question' }, task.metadata?.waiting?.question || '(no question recorded)'),
    details,
    form);
}

/** The recent messages of the waiting tasks' chats, read at most once per question and half
 *  minute: a list reload (every event) shows what was read; a task that asks again, or a read
 *  older than 30 s, has its chat read again; a failed read is tried again at the next showing;
 *  a task that stopped waiting is forgotten. */
function chatCache() {
  const kept = new Map();
  return {
    show(task, where) {
      const question = task.metadata?.waiting?.asked_at || '';
      let entry = kept.get(task.id);
      if (!entry || entry.question !== question || Date.now() - entry.at > FRESH_MS) {
        entry = { question, at: Date.now(), read: api(`/v1/streams/${encodeURIComponent(task.stream_id)}/messages?limit=10`) };
        kept.set(task.id, entry);
      }
      entry.read.then((answer) => put(where, chatLines(answer.messages)), (error) => {
        if (kept.get(task.id) === entry) kept.delete(task.id);
        put(where);
        failed(error, where);
      });
    },
    keepOnly(ids) {
      for (const id of [...kept.keys()]) if (!ids.has(id)) kept.delete(id);
    },
  };
}

function chatLines(messages) {
  return messages.length ? messages.map((m) => h('li', {},
    h('time', {}, when(m.at)), ' ', h('b', {}, m.sender), ': ', h('span', { class: 'text' }, m.text)))
    : h('li', { class: 'muted' }, 'No stored messages in this chat.');
}
