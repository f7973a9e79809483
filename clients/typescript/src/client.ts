/**
 * `Client`: submit a tool call, wait for its decision, run it only on go.
 *
 * Fail-closed: anything but a final `allowed` or `approved` (a refusal, a denial, an error, an
 * unreachable service, a deadline passed) ends in a `NotApproved` or another
 * `CountersignError` from `gated`, never in running the function.
 */
import { Conflict, CountersignError, MESSAGES, TimedOut, fill } from './errors.js';
import {
  ATTEMPTS,
  type CallState,
  RETRY_STATUSES,
  type SubmitCall,
  authHeaders,
  backoff,
  callId,
  callPath,
  callsPath,
  configuredUrl,
  editedArguments,
  isFinal,
  raiseUnlessGo,
  socketUrl,
  stateFrom,
  submitBody,
  unavailable,
} from './protocol.js';
import {
  DeadlineReached,
  PollFailed,
  SocketLost,
  SocketRefused,
  WaitPlan,
  type WebSocketConstructor,
  defaultWebSocket,
  sleep,
  socketWait,
} from './waiting.js';

export interface ClientOptions {
  /** The service, e.g. `http://127.0.0.1:8000`; default `COUNTERSIGN_URL`. */
  url?: string;
  /** The agent's API token; default `COUNTERSIGN_TOKEN`. */
  token?: string;
  /** The time allowed for each request or WebSocket handshake (a long-poll gets its own on top). */
  requestTimeoutMs?: number;
  /**
   * How long a wait keeps trying to reach a service it lost, from the last time the service
   * answered, before it throws `Unavailable`; null (the default): as long as its deadline allows.
   */
  reconnectForMs?: number | null;
  /**
   * The WebSocket class to wait with, or `false` to long-poll only. By default: the runtime's
   * own on a server runtime (Node 22 and later), else the `ws` package when it is installed,
   * else the long-poll (browsers, edge runtimes).
   */
  webSocket?: WebSocketConstructor | false;
  /** The `fetch` to use instead of the global one (proxies, tests). */
  fetch?: typeof fetch;
}

export interface WaitOptions {
  /** Give up after this long: the call is cancelled (unless `cancel` is false) and `TimedOut` thrown. */
  timeoutMs?: number;
  /** Aborting cancels the call (unless `cancel` is false) and rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Cancel the call on a timeout or an abort, so that nobody approves what will not run. */
  cancel?: boolean;
}

export interface GatedOptions<A> {
  /** The longest wait for a decision; past it the call is cancelled and `TimedOut` thrown. */
  deadlineMs?: number;
  principal?: string;
  runId?: string;
  /** What the approver reads as the reason for the call: text, or made from the arguments. */
  context?: string | ((args: A) => string);
  /** Checks and types the approver's edited arguments (a schema's `parse`); throw to refuse. */
  parseEdit?: (edited: Record<string, unknown>) => A;
}

interface RequestOptions {
  body?: string;
  headers?: Record<string, string>;
  attempts?: number;
  signal?: AbortSignal | undefined;
}

function secondsText(seconds: number): string {
  return String(Number(seconds.toFixed(3)));
}

function failureOf(error: unknown): string {
  const cause = (error as { cause?: { code?: unknown } } | null)?.cause;
  if (typeof cause?.code === 'string') {
    return cause.code;
  }
  return error instanceof Error ? error.name : 'Error';
}

function withoutCredentials(url: string): string {
  const shown = new URL(url);
  shown.username = '';
  shown.password = '';
  return shown.href.replace(/\/+$/, '');
}

/** The agent API over HTTP and WebSockets. */
export class Client {
  readonly url: string;
  readonly #headers: Record<string, string>;
  readonly #fetch: typeof fetch;
  readonly #requestTimeoutMs: number;
  readonly #reconnectForMs: number | null;
  readonly #webSocket: WebSocketConstructor | false | undefined;
  readonly #shownUrl: string;

  constructor(options: ClientOptions = {}) {
    this.url = configuredUrl(options.url);
    this.#headers = authHeaders(options.token);
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
    this.#reconnectForMs = options.reconnectForMs ?? null;
    this.#webSocket = options.webSocket;
    this.#shownUrl = withoutCredentials(this.url);
  }

  /**
   * Submit a call and return its state, whose status is the verdict (`pending` if held).
   * Network errors and 502/503/504 are retried with the same Idempotency-Key, so a retry never
   * creates a second call; other errors throw at once.
   */
  async submit(call: SubmitCall, options: { signal?: AbortSignal } = {}): Promise<CallState> {
    const headers = {
      ...this.#headers,
      'Content-Type': 'application/json',
      'Idempotency-Key': call.idempotencyKey ?? crypto.randomUUID(),
    };
    return this.#request('POST', callsPath(), { body: submitBody(call), headers, signal: options.signal });
  }

  /** The call's current state (`call` is a state or a call id). */
  async get(call: CallState | string, options: { signal?: AbortSignal } = {}): Promise<CallState> {
    return this.#request('GET', callPath(call), { signal: options.signal });
  }

  /**
   * Withdraw a pending call; `Conflict` if it is final already. Not retried: the retry of a
   * cancel that went through would be told `Conflict`.
   */
  async cancel(call: CallState | string, options: { signal?: AbortSignal } = {}): Promise<CallState> {
    return this.#request('POST', callPath(call, '/cancel'), { attempts: 1, signal: options.signal });
  }

  /**
   * The call's final state: by WebSocket, else by long-poll, reconnecting with backoff for as
   * long as it takes. Past `timeoutMs` the call is cancelled and `TimedOut` thrown; a call
   * decided just as it was being cancelled returns its final state.
   */
  async wait(call: CallState | string, options: WaitOptions = {}): Promise<CallState> {
    if (isFinal(call)) {
      return call;
    }
    const { timeoutMs, signal, cancel = true } = options;
    const Socket = this.#webSocket === false ? null : (this.#webSocket ?? (await defaultWebSocket()));
    const plan = new WaitPlan(timeoutMs, {
      webSocket: Socket !== null,
      reconnectForMs: this.#reconnectForMs,
    });
    const stop = new AbortController();
    const timer =
      timeoutMs === undefined ? undefined : setTimeout(() => stop.abort(new DeadlineReached(plan.seconds)), timeoutMs);
    const onAbort = (): void => stop.abort(signal?.reason);
    if (signal?.aborted) {
      onAbort();
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await this.#waitLoop(call, plan, Socket, stop.signal);
    } catch (error) {
      if (signal?.aborted) {
        if (cancel) {
          await this.#cancelQuietly(call);
        }
        throw signal.reason;
      }
      if (error instanceof DeadlineReached) {
        return await this.#giveUp(call, error.seconds, cancel);
      }
      throw error;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** `submit` and `wait`: the final state, whatever it is. */
  async call(call: SubmitCall, options: WaitOptions = {}): Promise<CallState> {
    const state = await this.submit(call, { ...(options.signal && { signal: options.signal }) });
    return this.wait(state, options);
  }

  /**
   * An async function that submits each call of `fn` as `tool` with its arguments, and runs
   * `fn` only if the call is allowed or approved: with the approver's edited arguments when
   * they edited them, and the final state as its second argument (with the `receipt` a tool
   * may verify). Otherwise `fn` does not run and the function throws: `NotApproved` (with the
   * status, the reason and the comment), `TimedOut` when `deadlineMs` passes first (the call
   * is cancelled), or the error that kept the answer away.
   */
  gated<A extends object, R>(
    tool: string,
    fn: (args: A, state: CallState) => R | PromiseLike<R>,
    options: GatedOptions<A> = {},
  ): (args: A, call?: { signal?: AbortSignal }) => Promise<Awaited<R>> {
    return async (args, call = {}): Promise<Awaited<R>> => {
      const context = typeof options.context === 'function' ? options.context(args) : options.context;
      const state = await this.submit(
        {
          tool,
          arguments: args as Record<string, unknown>,
          ...(options.principal !== undefined && { principal: options.principal }),
          ...(options.runId !== undefined && { runId: options.runId }),
          ...(context !== undefined && { context }),
        },
        { ...(call.signal && { signal: call.signal }) },
      );
      const final = await this.wait(state, {
        ...(options.deadlineMs !== undefined && { timeoutMs: options.deadlineMs }),
        ...(call.signal && { signal: call.signal }),
      });
      raiseUnlessGo(final);
      const edited = editedArguments(final);
      if (edited === null) {
        return await fn(args, final);
      }
      return await fn(options.parseEdit ? options.parseEdit(edited) : (edited as A), final);
    };
  }

  async #waitLoop(
    call: CallState | string,
    plan: WaitPlan,
    Socket: WebSocketConstructor | null,
    signal: AbortSignal,
  ): Promise<CallState> {
    for (;;) {
      if (plan.webSocket && Socket !== null) {
        try {
          return await socketWait(Socket, socketUrl(this.url, call), this.#headers, {
            openTimeoutMs: plan.openTimeout(this.#requestTimeoutMs),
            signal,
            onOpen: () => plan.socketOpened(),
          });
        } catch (error) {
          if (error instanceof SocketRefused) {
            plan.webSocket = false;
          } else if (error instanceof SocketLost) {
            plan.socketLost(error);
          } else {
            throw error;
          }
        }
      }
      let state: CallState;
      try {
        state = await this.#poll(call, plan, signal);
      } catch (error) {
        if (error instanceof PollFailed) {
          await sleep(plan.pause(), signal);
          continue;
        }
        throw error;
      }
      plan.pollReached();
      if (isFinal(state)) {
        return state;
      }
    }
  }

  async #poll(call: CallState | string, plan: WaitPlan, signal: AbortSignal): Promise<CallState> {
    const { seconds, readMs } = plan.poll(this.#requestTimeoutMs);
    const query = seconds === null ? '' : `?timeout=${seconds}`;
    let response: Response;
    try {
      response = await this.#fetch(this.url + callPath(call, '/wait') + query, {
        headers: this.#headers,
        signal: AbortSignal.any([signal, AbortSignal.timeout(readMs)]),
      });
      if (RETRY_STATUSES.has(response.status)) {
        await response.body?.cancel();
        throw new PollFailed();
      }
      return await stateFrom(response);
    } catch (error) {
      if (signal.aborted) {
        throw signal.reason;
      }
      if (error instanceof CountersignError || error instanceof PollFailed) {
        throw error;
      }
      throw new PollFailed(); // the service is out of reach, or the answer was cut off
    }
  }

  async #giveUp(call: CallState | string, seconds: number, cancel: boolean): Promise<CallState> {
    const id = callId(call);
    const last = typeof call === 'string' ? null : call;
    const shown = secondsText(seconds);
    if (!cancel) {
      throw new TimedOut(id, MESSAGES.deadlineLeftPending, { cancelled: false, state: last });
    }
    let state: CallState;
    try {
      try {
        state = await this.#request('POST', callPath(call, '/cancel'));
      } catch (error) {
        if (!(error instanceof Conflict)) {
          throw error;
        }
        state = await this.get(call); // final already: decided meanwhile, or a retried cancel
      }
    } catch (error) {
      if (error instanceof CountersignError) {
        const detail = error.code || error.name;
        const message = fill(MESSAGES.deadlineNotCancelled, { seconds: shown, detail });
        throw new TimedOut(id, message, { cancelled: false, state: last });
      }
      throw error;
    }
    if (state.status === 'cancelled') {
      const message = fill(MESSAGES.deadlineCancelled, { seconds: shown });
      throw new TimedOut(id, message, { cancelled: true, state });
    }
    return state; // decided at the last moment: an approval then stands
  }

  async #cancelQuietly(call: CallState | string): Promise<void> {
    try {
      await this.#request('POST', callPath(call, '/cancel'));
    } catch {
      // final already, or out of reach: the caller's abort is what it hears about
    }
  }

  async #request(method: string, path: string, options: RequestOptions = {}): Promise<CallState> {
    const { signal, attempts = ATTEMPTS } = options;
    let failure = '';
    for (let attempt = 0; attempt < attempts; attempt += 1) {
      if (attempt > 0) {
        await sleep(backoff(attempt), signal ?? new AbortController().signal);
      }
      const timeout = AbortSignal.timeout(this.#requestTimeoutMs);
      let response: Response;
      try {
        response = await this.#fetch(this.url + path, {
          method,
          headers: options.headers ?? this.#headers,
          ...(options.body !== undefined && { body: options.body }),
          signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
        });
      } catch (error) {
        if (signal?.aborted) {
          throw signal.reason;
        }
        failure = `${failureOf(error)} at ${this.#shownUrl}`;
        continue;
      }
      if (!RETRY_STATUSES.has(response.status)) {
        return await stateFrom(response);
      }
      await response.body?.cancel();
      failure = `HTTP ${response.status}`;
    }
    throw unavailable(failure);
  }
}
