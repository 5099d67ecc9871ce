// Building the page without HTML strings: every element is created with createElement and every
// piece of text — above all task and chat text — goes in as a text node (textContent), never as
// HTML and never into an attribute. The Content-Security-Policy (Trusted Types) makes any
// innerHTML assignment throw, so a slip cannot turn text into markup.

/** An element: `h('td', {class: 'x'}, 'text', child)`. Props: class, id, for, type, name,
 *  value, placeholder, href (only links built here from ids), role, aria-*, data-*, hidden,
 *  disabled, title (fixed UI strings only), and on* handlers. Children: strings become text. */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === 'class') {
      el.className = value;
    } else if (key === 'value') {
      el.value = value;
    } else if (value === true) {
      el.setAttribute(key, '');
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces everything inside `el`. */
export function put(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

const SVG = 'http://www.w3.org/2000/svg';

/** An SVG element with numeric/fixed attributes (charts only: never text from a task). */
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
  append(el, children);
  return el;
}

/** A local date and time (the viewer's time zone). */
export function when(iso) {
  if (!iso) return '—';
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return '—';
  return date.toLocaleString(undefined, {
    year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit',
  });
}

/** "3 min ago", "in 2 h". */
export function relative(iso, now = Date.now()) {
  if (!iso) return '';
  const seconds = Math.round((new Date(iso).getTime() - now) / 1000);
  const abs = Math.abs(seconds);
  const [value, unit] = abs < 60 ? [abs, 's'] : abs < 3600 ? [Math.round(abs / 60), 'min']
    : abs < 86400 ? [Math.round(abs / 3600), 'h'] : [Math.round(abs / 86400), 'd'];
  return seconds < 0 ? `${value} ${unit} ago` : `in ${value} ${unit}`;
}

/** The viewer's time zone name. */
export function zone() {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time';
}

/** A status badge. */
export function badge(status) {
  return h('span', { class: `status s-${String(status).replace(/[^a-z_]/g, '')}` }, String(status).replace('_', ' '));
}

/** A link to a task's detail page (the id is a UUID; encoded anyway). */
export function taskLink(task, text) {
  return h('a', { href: `#/task/${encodeURIComponent(task.id)}` }, text ?? task.title ?? task.short_id);
}

/** What a trigger means, in words. */
export function triggerText(trigger) {
  if (!trigger) return '';
  if (trigger.kind === 'cron') return `cron ${trigger.expr}${trigger.timezone ? ` (${trigger.timezone})` : ''}`;
  if (trigger.kind === 'delay') return `after ${trigger.seconds} s`;
  return 'now';
}

/** A message line for a form: `role="alert"` for errors. */
export function notice(text, kind = 'info') {
  return h('p', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
}

/** Calls `fn` at most once per `ms` (trailing), for reloads triggered by bursts of events. */
export function debounce(fn, ms = 250) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}
