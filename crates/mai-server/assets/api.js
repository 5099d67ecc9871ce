// Talking to the API: the token (kept in sessionStorage for this browser tab only, sent as a
// bearer header, never in a URL), JSON calls that say they come from the dashboard (so the
// status log's actor is `dashboard:operator`), and the live event stream read with fetch and a
// stream reader (EventSource cannot send the header).

import { notice } from './dom.js';

const KEY = 'mai-agent.token';

export const token = {
  get: () => sessionStorage.getItem(KEY) || '',
  set: (value) => sessionStorage.setItem(KEY, value),
  clear: () => sessionStorage.removeItem(KEY),
};

/** The server wants a (different) token. */
export class AuthError extends Error {}

/** Any other refusal: `status` and the server's message. */
export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

function headers(json, bearer = token.get()) {
  const out = { Accept: 'application/json', 'X-Mai-Client': 'dashboard' };
  if (bearer) out.Authorization = `Bearer ${bearer}`;
  if (json) out['Content-Type'] = 'application/json';
  return out;
}

/** The statuses a task can be paused from (and cancelled from, with `paused` itself). */
export const PAUSABLE = ['scheduled', 'pending', 'running', 'waiting_input'];

/** A JSON call; `ok` lists the non-2xx statuses whose body is still an answer (503 health);
 *  `bearer` tries a token other than the kept one (the login, before keeping it). */
export async function api(path, { method = 'GET', body, ok = [], bearer } = {}) {
  const response = await fetch(path, {
    method,
    headers: headers(body !== undefined, bearer ?? token.get()),
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
    credentials: 'omit',
    redirect: 'error',
  });
  const data = await response.json().catch(() => ({}));
  if (response.status === 401) throw new AuthError(data.error || 'the token is missing or wrong');
  if (!response.ok && !ok.includes(response.status)) {
    throw new ApiError(response.status, data.error || `${response.status} ${response.statusText}`, data);
  }
  return data;
}

/** The first `wanted` tasks `GET /v1/tasks?{query}` matches, reading page after page
 *  (`next_offset`): the tasks, the first answer (its `total` and `counts`), and the offset of
 *  the rest (`null`: none left). */
export async function taskPages(query, wanted = Infinity) {
  const tasks = [];
  let first = null;
  let offset = 0;
  while (offset !== null && tasks.length < wanted) {
    const q = new URLSearchParams(query);
    q.set('offset', String(offset));
    q.set('limit', String(Math.min(500, wanted - tasks.length)));
    const page = await api(`/v1/tasks?${q}`);
    first ??= page;
    tasks.push(...page.tasks);
    offset = page.next_offset ?? null;
  }
  return { tasks, first, next: offset };
}

/** Every task `GET /v1/tasks?{query}` matches. */
export async function allTasks(query) {
  return (await taskPages(query)).tasks;
}

/** Reads `GET /v1/events` until `signal` aborts, calling `onEvent(name, data)` for each event and
 *  `onState('live' | 'reconnecting' | 'lagged')`; reconnects with a growing pause. */
export async function follow(onEvent, onState, signal) {
  let pause = 500;
  while (!signal.aborted) {
    try {
      const response = await fetch('/v1/events', { headers: headers(false), cache: 'no-store', signal });
      if (response.status === 401) throw new AuthError('the token is missing or wrong');
      if (!response.ok || !response.body) throw new Error(`events: ${response.status}`);
      onState('live');
      pause = 500;
      await read(response.body, onEvent, onState);
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof AuthError) throw error;
    }
    onState('reconnecting');
    await new Promise((resolve) => setTimeout(resolve, pause));
    pause = Math.min(pause * 2, 15000);
  }
}

async function read(body, onEvent, onState) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) name = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
      }
      if (data.length === 0) continue; // a keep-alive comment
      let parsed;
      try {
        parsed = JSON.parse(data.join('\n'));
      } catch {
        continue;
      }
      if (name === 'lagged') onState('lagged');
      onEvent(name, parsed);
    }
  }
}

/** Reports a failed call in `where`; a refused token sends the person back to the login. */
export function failed(error, where) {
  if (error instanceof AuthError) {
    window.dispatchEvent(new CustomEvent('mai-auth-refused'));
    return;
  }
  where.append(notice(String(error.message || error), 'error'));
}
