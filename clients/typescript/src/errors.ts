/**
 * What can go wrong for an agent, as classes that say what to do next. Every one of them means
 * the same for the agent: the call is not approved, so the tool must not run. Messages never
 * repeat the call's arguments: they end up in logs and in a model's context.
 */
import type { CallState, CallStatus } from './protocol.js';

export const MESSAGES = {
  badRequest: 'The service rejected the request as malformed (400): fix the request.',
  unauthenticated:
    'The service did not accept the token (401): check the token; it may be mistyped, revoked, or meant for another server.',
  forbidden:
    'The service refused this agent (403): the agent is disabled, or it may not act for that principal; ask the service\'s administrator.',
  notFound: 'No such call for this agent (404): check the call id; an agent sees only its own calls.',
  conflict:
    'The service refused a repeat (409): an Idempotency-Key was reused with another body, or the call is already final; use a new key, or read the call\'s state.',
  tooLarge: 'The request is too large (413): shrink the arguments or the context.',
  rateLimited: 'Too many requests (429): wait {wait} before trying again.',
  unexpectedStatus: 'The service answered HTTP {status}: the call is not approved; do not run it.',
  unavailable:
    'The approval service could not be reached or failed ({detail}): the call is not approved; do not run it, and try again later.',
  serviceSays: ' The service says: {detail}',
  notAState: 'the answer is not a call state',
  lostWhileWaiting: 'no answer for {seconds} seconds while waiting',
  deadlineCancelled:
    'No decision within {seconds} seconds, so the agent stopped waiting and cancelled the call: no one can approve it now. Do not run the tool; submit it again if it is still needed.',
  deadlineNotCancelled:
    'No decision within {seconds} seconds, so the agent stopped waiting, but the call could not be cancelled ({detail}): it may still be decided on the service. Do not run the tool.',
  deadlineLeftPending:
    'No decision within {seconds} seconds: the call is still pending on the service; wait for it again, or cancel it.',
  badEdit: 'The approver\'s edited arguments are not a JSON object: the tool must not run.',
  notApproved: 'The call was {status}: do not run the tool; {advice}',
  why: ' Why: {reason}',
} as const;

const ADVICE: Record<string, string> = {
  refused: 'the policy refuses it, so change the call rather than retry it unchanged.',
  denied: 'a reviewer denied it, so do not retry it unchanged.',
  expired: 'no one decided in time; submit it again only if it is still needed.',
  cancelled: 'it was withdrawn.',
  pending: 'no one has decided it yet.',
};

export function fill(template: string, values: Record<string, string | number>): string {
  return template.replace(/\{(\w+)\}/g, (whole, name: string) =>
    name in values ? String(values[name]) : whole,
  );
}

/** The base of every error the client throws; `code` is the service's machine code, if any. */
export class CountersignError extends Error {
  readonly code: string;

  constructor(message: string, options: { code?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code ?? '';
  }
}

/** 400: the request is malformed (the service's message says which part). */
export class BadRequest extends CountersignError {}

/** 401: the token is missing, unknown or revoked. */
export class Unauthenticated extends CountersignError {}

/** 403: the agent is disabled, or it may not act for the principal it named. */
export class Forbidden extends CountersignError {}

/** 404: no such call among this agent's calls. */
export class NotFound extends CountersignError {}

/** 409: an Idempotency-Key reused with another body, or a cancel of a final call. */
export class Conflict extends CountersignError {}

/** 413: the body is over the service's limit. */
export class TooLarge extends CountersignError {}

/** 429: too many requests; `retryAfter` is the service's advice in seconds, when it gave one. */
export class RateLimited extends CountersignError {
  readonly retryAfter: number | null;

  constructor(message: string, options: { code?: string; retryAfter?: number | null } = {}) {
    super(message, options);
    this.retryAfter = options.retryAfter ?? null;
  }
}

/** The service could not be reached, or failed, even after retrying. */
export class Unavailable extends CountersignError {}

/** The reason a model should read: the decision's comment, else the policy's reasons. */
function reasonOf(state: CallState): string {
  const comment = state.decision?.comment ?? '';
  if (comment) {
    return comment;
  }
  return state.reasons.map((reason) => reason.message).filter(Boolean).join('; ');
}

/**
 * The service's answer is no: `status` is `refused`, `denied`, `expired` or `cancelled`;
 * `comment` is the decision's comment ("" when none was written); `reason` is what the model
 * should read (the comment, else the policy's reasons); `state` is the whole final call state.
 */
export class NotApproved extends CountersignError {
  readonly status: CallStatus;
  readonly reason: string;
  readonly comment: string;
  readonly state: CallState | null;

  constructor(state: CallState, message?: string);
  constructor(state: CallState | null, message: string, status: CallStatus);
  constructor(state: CallState | null, message?: string, status?: CallStatus) {
    const known = status ?? state?.status ?? 'pending';
    // A state of its own: the model reads why it was decided so; else the message says it all.
    const reason = status === undefined && state !== null ? reasonOf(state) : '';
    const text =
      message ??
      fill(MESSAGES.notApproved, { status: known, advice: ADVICE[known] ?? '' }) +
        (reason ? fill(MESSAGES.why, { reason }) : '');
    super(text);
    this.status = known;
    this.reason = reason || text;
    this.comment = state?.decision?.comment ?? '';
    this.state = state;
  }
}

/**
 * The agent's deadline passed before a decision. `cancelled` says whether the client cancelled
 * the call on the way out (so nobody can approve it any more; `status` is then `cancelled`,
 * else `pending`); `state` is the call as last seen, when it was seen.
 */
export class TimedOut extends NotApproved {
  readonly callId: string;
  readonly cancelled: boolean;

  constructor(
    callId: string,
    message: string,
    options: { cancelled: boolean; state: CallState | null },
  ) {
    super(options.state, message, options.cancelled ? 'cancelled' : 'pending');
    this.callId = callId;
    this.cancelled = options.cancelled;
  }
}
