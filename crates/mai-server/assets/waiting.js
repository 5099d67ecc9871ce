// Waiting for people: every task in `waiting_input`, the longest-waiting first, with its
// question, whom it waits for, the recent messages of its chat, and a form to answer it in place
// (sent with `X-Mai-Client: dashboard`, so the resume's status-log line names the dashboard).
// The list reloads (at most twice a second) as tasks start or stop waiting, and after missed
// events; an answer being typed, and the focus, survive the reload (each box's id is its
// task's).

import { api, allTasks, failed } from './api.js';
import { h, put, putKeeping, when, relative, taskLink, notice, throttle, latest } from './dom.js';

export function render(main) {
  const list = h('div', { class: 'cards', id: 'waiting-list' });
  const messages = h('div');
  put(main, h('h1', {}, 'Waiting for people'),
    h('p', { class: 'muted' }, 'Tasks that asked a question and wait for its answer, the longest-waiting first.'),
    messages, list);

  const load = latest(async (current) => {
    try {
      const tasks = await allTasks({ status: 'waiting_input', order: 'oldest' });
      if (!current()) return;
      const since = (t) => t.metadata?.waiting?.asked_at || t.updated_at;
      tasks.sort((a, b) => new Date(since(a)) - new Date(since(b)));
      put(messages);
      putKeeping(list, tasks.length ? tasks.map((t) => card(t, since(t))) : h('p', { class: 'empty' }, 'Nobody is being waited for.'));
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

function card(task, since) {
  const chat = h('ol', { class: 'chat' }, h('li', { class: 'muted' }, 'loading the chat…'));
  // Stays open across reloads once opened.
  const details = h('details', { id: `chat-${task.id}` }, h('summary', {}, 'Recent messages in this chat'), chat);
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
      text.disabled = true;
    } catch (error) {
      button.disabled = false;
      failed(error, status);
    }
  } }, text, button, status);
  loadChat(task, chat);
  return h('article', { class: 'card waiting' },
    h('h2', {}, taskLink(task), ' ', h('small', { class: 'id' }, task.short_id)),
    h('p', { class: 'muted' }, `waits for ${task.metadata?.requester || task.owner} in ${task.stream_id} since ${when(since)} (${relative(since)})`),
    h('p', { class: 'text question' }, task.metadata?.waiting?.question || '(no question recorded)'),
    details,
    form);
}

async function loadChat(task, where) {
  try {
    const { messages } = await api(`/v1/streams/${encodeURIComponent(task.stream_id)}/messages?limit=10`);
    put(where, messages.length ? messages.map((m) => h('li', {},
      h('time', {}, when(m.at)), ' ', h('b', {}, m.sender), ': ', h('span', { class: 'text' }, m.text)))
      : h('li', { class: 'muted' }, 'No stored messages in this chat.'));
  } catch (error) {
    put(where);
    failed(error, where);
  }
}
