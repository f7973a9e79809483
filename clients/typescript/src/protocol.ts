/**
 * The agent API without I/O: the call state's shape, request bodies and paths, answers read
 * into states or errors, which statuses mean go, and the retry schedule.
 */
import {
  BadRequest,
  Conflict,
  CountersignError,
  Forbidden,
  MESSAGES,
  NotApproved,
  NotFound,
  RateLimited,
  TooLarge,
  Unauthenticated,
  Unavailable,
  fill,
} from './errors.js';

export type CallStatus =
  | 'allowed'
  | 'refused'
  | 'pending'
  | 'approved'
  | 'denied'
  | 'expired'
  | 'cancelled';

/** One finding that refused or held the call (`docs/policies.md`, "Reading the reasons"). */
export interface Reason {
  policy: string;
  rule: string | null;
  action: string;
  gate: string;
  message: string;
}

export interface Decision {
  by: string | null;
  comment: string;
  at: string;
}

/** The call state, in the API's JSON names (`docs/api.md`, "The call state"). */
export interface CallState {
  id: string;
  status: CallStatus;
  tool: string;
  principal: string;
  run_id: string;
  /** The approver's edited arguments (JSON text) when `edited`; else null. */
  arguments: string | null;
  arguments_sha256: string;
  edited: boolean;
  original_arguments_sha256: string | null;
  reasons: Reason[];
  /** What shadow cap rules would have said, as `reasons`: never enforced (older servers omit). */
  shadow?: Reason[];
  gates: string[];
  approvals: { by: string; at: string }[];
  decision: Decision | null;
  created_at: string;
  expires_at: string | null;
  links: { self: string; wait: string; ws: string };
  /** The signed receipt (`verifyReceipt`) when `allowed` or `approved`; else null. */
  receipt: string | null;
}

/** Tokens and cost spent since the agent's previous call (for budgets). */
export interface Usage {
  inputTokens?: number;
  outputTokens?: number;
  /** A decimal string, at most 9 fraction digits: `"0.0042"`. */
  cost?: string;
  costCurrency?: string;
}

export interface SubmitCall {
  tool: string;
  /** The model's exact JSON text (preferred), or an object serialised here. */
  arguments: string | Record<string, unknown>;
  principal?: string;
  runId?: string;
  context?: string;
  usage?: Usage;
  /** Sent with every retry of this submit; a fresh one when left out. */
  idempotencyKey?: string;
}

export const FINAL_STATUSES: ReadonlySet<string> = new Set([
  'allowed',
  'refused',
  'approved',
  'denied',
  'expired',
  'cancelled',
]);
export const GO_STATUSES: ReadonlySet<string> = new Set(['allowed', 'approved']);

export const URL_VARIABLE = 'COUNTERSIGN_URL';
export const TOKEN_VARIABLE = 'COUNTERSIGN_TOKEN';
const CALLS_PATH = '/api/v1/calls';

// Worth another try: the service, or a proxy in front of it, is restarting or overloaded.
export const RETRY_STATUSES: ReadonlySet<number> = new Set([502, 503, 504]);
export const ATTEMPTS = 4;
const BACKOFF_BASE_MS = 250;
const BACKOFF_CAP_MS = 4000;
const DETAIL_LIMIT = 300;
const TOKEN = /^[!-~]+$/;

const ERRORS: Record<number, [new (message: string, options: { code: string }) => CountersignError, string]> = {
  400: [BadRequest, MESSAGES.badRequest],
  401: [Unauthenticated, MESSAGES.unauthenticated],
  403: [Forbidden, MESSAGES.forbidden],
  404: [NotFound, MESSAGES.notFound],
  409: [Conflict, MESSAGES.conflict],
  413: [TooLarge, MESSAGES.tooLarge],
};

function environment(name: string): string {
  // Edge runtimes have no `process`; there the URL and token must be passed.
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
  return env?.[name] ?? '';
}

/** The service's URL without a trailing slash; only `http` and `https` will do. */
export function configuredUrl(url: string | undefined): string {
  const value = url ?? environment(URL_VARIABLE);
  if (!value) {
    throw new TypeError(`No service URL for Countersign: pass { url } or set ${URL_VARIABLE}.`);
  }
  if (!/^https?:\/\//i.test(value)) {
    throw new TypeError('The service URL must start with http:// or https://.');
  }
  return value.replace(/\/+$/, '');
}

/** The bearer header; a token that cannot be one is refused here, without repeating it. */
export function authHeaders(token: string | undefined): Record<string, string> {
  const value = token ?? environment(TOKEN_VARIABLE);
  if (!value) {
    throw new TypeError(`No agent token for Countersign: pass { token } or set ${TOKEN_VARIABLE}.`);
  }
  if (!TOKEN.test(value)) {
    throw new TypeError('The token must be visible ASCII characters without spaces: check the token.');
  }
  return { Authorization: `Bearer ${value}` };
}

function finiteNumbers(_key: string, value: unknown): unknown {
  // JSON.stringify writes NaN and Infinity as null: an amount must never change silently.
  if (typeof value === 'number' && !Number.isFinite(value)) {
    throw new TypeError('A number that is NaN or infinite is not JSON: nothing was submitted.');
  }
  return value;
}

/** The arguments as JSON text: a string is the model's text already and goes unchanged. */
export function argumentsText(value: string | Record<string, unknown>): string {
  return typeof value === 'string' ? value : JSON.stringify(value, finiteNumbers);
}

/**
 * The `POST /api/v1/calls` body, serialised once: a retry must send the very same bytes, or
 * the service takes the reused Idempotency-Key for another request (409).
 */
export function submitBody(call: SubmitCall): string {
  const body: Record<string, unknown> = { tool: call.tool, arguments: argumentsText(call.arguments) };
  if (call.principal !== undefined) body.principal = call.principal;
  if (call.runId !== undefined) body.run_id = call.runId;
  if (call.context !== undefined) body.context = call.context;
  if (call.usage !== undefined) {
    const usage: Record<string, unknown> = {};
    if (call.usage.inputTokens !== undefined) usage.input_tokens = call.usage.inputTokens;
    if (call.usage.outputTokens !== undefined) usage.output_tokens = call.usage.outputTokens;
    if (call.usage.cost !== undefined) usage.cost = call.usage.cost;
    if (call.usage.costCurrency !== undefined) usage.cost_currency = call.usage.costCurrency;
    body.usage = usage;
  }
  return JSON.stringify(body);
}

export function callId(call: CallState | string): string {
  return typeof call === 'string' ? call : call.id;
}

export function callsPath(): string {
  return CALLS_PATH;
}

export function callPath(call: CallState | string, suffix = ''): string {
  return `${CALLS_PATH}/${encodeURIComponent(callId(call))}${suffix}`;
}

/** The call's WebSocket URL on the service's host (`http` → `ws`, `https` → `wss`). */
export function socketUrl(base: string, call: CallState | string): string {
  return `${base.replace(/^http/i, 'ws')}/ws/v1/calls/${encodeURIComponent(callId(call))}`;
}

export function isFinal(call: CallState | string): call is CallState {
  return typeof call !== 'string' && FINAL_STATUSES.has(call.status);
}

export function isGo(state: CallState): boolean {
  return GO_STATUSES.has(state.status);
}

/**
 * Milliseconds to pause after `failures` failures in a row: doubling up to a cap, half of it
 * random so that agents cut off together do not all come back in the same instant.
 */
export function backoff(failures: number): number {
  const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.max(failures - 1, 0));
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

/** `Retry-After` in seconds: delay-seconds or an HTTP date; null if absent or invalid. */
export function retryAfter(value: string | null): number | null {
  if (value === null) {
    return null;
  }
  const text = value.trim();
  if (/^\d+$/.test(text)) {
    return Number(text);
  }
  const moment = Date.parse(text);
  return Number.isNaN(moment) ? null : Math.max((moment - Date.now()) / 1000, 0);
}

export function unavailable(detail: string, says = '', code = ''): Unavailable {
  return new Unavailable(fill(MESSAGES.unavailable, { detail }) + says, { code });
}

async function errorBody(response: Response): Promise<[string, string]> {
  try {
    const body = (await response.json()) as { error?: { code?: unknown; message?: unknown } };
    const error = body.error;
    if (typeof error !== 'object' || error === null) {
      return ['', ''];
    }
    return [String(error.code ?? ''), String(error.message ?? '').slice(0, DETAIL_LIMIT)];
  } catch {
    return ['', '']; // e.g. a proxy's HTML page
  }
}

/**
 * The error for an error answer. The service's own message is added: it never repeats what
 * the agent sent, and it says which field or which rule is at fault.
 */
export async function errorFor(response: Response): Promise<CountersignError> {
  const [code, detail] = await errorBody(response);
  const status = response.status;
  const says = detail ? fill(MESSAGES.serviceSays, { detail }) : '';
  if (status === 429) {
    const after = retryAfter(response.headers.get('Retry-After'));
    const wait = after === null ? 'a moment' : `${after} seconds`;
    return new RateLimited(fill(MESSAGES.rateLimited, { wait }) + says, { code, retryAfter: after });
  }
  const known = ERRORS[status];
  if (known !== undefined) {
    const [Kind, message] = known;
    return new Kind(message + says, { code });
  }
  if (status >= 500) {
    return unavailable(`HTTP ${status}`, says, code);
  }
  return new CountersignError(fill(MESSAGES.unexpectedStatus, { status }) + says, { code });
}

/** The call state in a successful answer; otherwise throws the matching error. */
export async function stateFrom(response: Response): Promise<CallState> {
  if (!response.ok) {
    throw await errorFor(response);
  }
  let state: unknown;
  try {
    state = await response.json();
  } catch {
    state = null;
  }
  const candidate = state as Partial<CallState> | null;
  if (
    typeof candidate !== 'object' ||
    candidate === null ||
    typeof candidate.status !== 'string' ||
    typeof candidate.id !== 'string'
  ) {
    throw unavailable(MESSAGES.notAState);
  }
  return candidate as CallState;
}

/** The final state if it means go; else `NotApproved` carrying it. */
export function raiseUnlessGo(state: CallState): CallState {
  if (!isGo(state)) {
    throw new NotApproved(state);
  }
  return state;
}

/**
 * The arguments an approver edited the call to, as an object; null when not edited. Anything
 * but a JSON object is a `CountersignError`: then nothing may run.
 */
export function editedArguments(state: CallState): Record<string, unknown> | null {
  if (state.edited !== true) {
    return null;
  }
  let edited: unknown;
  try {
    edited = JSON.parse(state.arguments ?? '');
  } catch {
    throw new CountersignError(MESSAGES.badEdit);
  }
  if (typeof edited !== 'object' || edited === null || Array.isArray(edited)) {
    throw new CountersignError(MESSAGES.badEdit);
  }
  return edited as Record<string, unknown>;
}
