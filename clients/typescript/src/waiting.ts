/**
 * How a wait for a decision proceeds. The WebSocket comes first: it brings the decision the
 * moment it is made. A socket that fails or drops means one long-poll now and the socket again
 * after it; one that keeps failing to open while the long-poll gets through (a proxy that does
 * not pass WebSockets) means long-polling for the rest of the wait. Failures to reach the
 * service in a row back off exponentially up to a cap. After every (re)connect the service
 * sends the current state first, so a decision made while the client was away is never lost.
 */
import { BadRequest, CountersignError, Forbidden, MESSAGES, NotFound, fill } from './errors.js';
import { type CallState, backoff, isFinal, unavailable } from './protocol.js';

/** The service's default long-poll; a longer one is refused, a shorter one costs requests. */
export const MAX_POLL_SECONDS = 25;
const OPEN_TIMEOUT_MS = 10_000;
// Timers can fire a hair early; a wait this close to its deadline is over.
const DEADLINE_RESOLUTION_MS = 10;
// Failed opens in a row, with the long-poll getting through, before the socket is given up.
const OPEN_FAILURES_TO_GIVE_UP = 2;

/** The part of a WebSocket this client uses: `ws` and the runtimes' own all have it. */
export interface SocketLike {
  close(code?: number, reason?: string): void;
  addEventListener(type: 'open' | 'message' | 'close' | 'error', listener: (event: never) => void): void;
}

/** A WebSocket class whose constructor takes headers (`ws`, and Node's own from Node 22). */
export type WebSocketConstructor = new (
  url: string,
  options: { headers: Record<string, string> },
) => SocketLike;

/** The socket cannot be used here (refused, or it cannot send the token): long-poll instead. */
export class SocketRefused extends Error {}

/** The socket did not connect, or dropped: long-poll now, try the socket again later. */
export class SocketLost extends Error {
  constructor(readonly opened: boolean) {
    super('the WebSocket was lost');
  }
}

/** The long-poll did not reach the service, or a proxy said it is away: pause, retry. */
export class PollFailed extends Error {}

/** The wait's deadline passed. */
export class DeadlineReached extends Error {
  constructor(readonly seconds: number) {
    super('the deadline passed');
  }
}

// Closes the service sends on purpose; 4401 is not among them: a runtime whose WebSocket sends
// no headers looks the same, so the long-poll, which always can, has the last word on the token.
const CLOSE_ERRORS: Record<number, [new (message: string) => CountersignError, string]> = {
  4400: [BadRequest, MESSAGES.badRequest],
  4403: [Forbidden, MESSAGES.forbidden],
  4404: [NotFound, MESSAGES.notFound],
};
const CLOSE_REFUSED = new Set([4401, 4429]);

let foundWebSocket: Promise<WebSocketConstructor | null> | undefined;

/**
 * The runtime's own WebSocket on a server runtime (Node 22 and later take headers), else the
 * `ws` package when it is installed, else none: then waits long-poll (browsers, edge runtimes).
 * A runtime's WebSocket that drops the header is closed with 4401, and the long-poll takes over.
 */
export function defaultWebSocket(): Promise<WebSocketConstructor | null> {
  foundWebSocket ??= (async () => {
    const global = (globalThis as { WebSocket?: unknown }).WebSocket;
    const server = (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node;
    if (typeof global === 'function' && server !== undefined) {
      return global as WebSocketConstructor;
    }
    try {
      const name = 'ws'; // not a literal, so that bundlers for the edge leave it alone
      const module = (await import(name)) as { WebSocket?: unknown; default?: unknown };
      return (module.WebSocket ?? module.default) as WebSocketConstructor;
    } catch {
      return null;
    }
  })();
  return foundWebSocket;
}

/** One wait's deadline, its choice of WebSocket or long-poll, and its run of failures. */
export class WaitPlan {
  webSocket: boolean;
  readonly seconds: number;
  #failures = 0;
  #openFailures = 0;
  #deadlineAt: number | null;
  #lastReached: number;
  #reconnectForMs: number | null;

  constructor(timeoutMs: number | undefined, options: { webSocket: boolean; reconnectForMs: number | null }) {
    const now = Date.now();
    this.webSocket = options.webSocket;
    this.seconds = timeoutMs === undefined ? 0 : timeoutMs / 1000;
    this.#deadlineAt = timeoutMs === undefined ? null : now + timeoutMs;
    this.#lastReached = now; // the submit (or the caller) just reached it
    this.#reconnectForMs = options.reconnectForMs;
  }

  /** Milliseconds until the deadline (null: none); `DeadlineReached` once it passed. */
  timeLeft(): number | null {
    if (this.#deadlineAt === null) {
      return null;
    }
    const left = this.#deadlineAt - Date.now();
    if (left <= DEADLINE_RESOLUTION_MS) {
      throw new DeadlineReached(this.seconds);
    }
    return left;
  }

  /** How long a WebSocket handshake may take: a request's time, never past the deadline. */
  openTimeout(requestTimeoutMs: number): number {
    const left = this.timeLeft();
    const limit = Math.min(OPEN_TIMEOUT_MS, requestTimeoutMs);
    return left === null ? limit : Math.min(limit, left);
  }

  /**
   * The long-poll's seconds (null: the service's default, which also suits a service set to a
   * shorter maximum) and how long to wait for its answer: whole seconds up to the deadline.
   */
  poll(requestTimeoutMs: number): { seconds: number | null; readMs: number } {
    const left = this.timeLeft();
    if (left === null || left >= MAX_POLL_SECONDS * 1000) {
      return { seconds: null, readMs: MAX_POLL_SECONDS * 1000 + requestTimeoutMs };
    }
    const seconds = Math.ceil(left / 1000);
    return { seconds, readMs: seconds * 1000 + requestTimeoutMs };
  }

  /** The service answered: the next failure starts the backoff afresh. */
  reached(): void {
    this.#failures = 0;
    this.#lastReached = Date.now();
  }

  socketOpened(): void {
    this.#openFailures = 0;
    this.reached();
  }

  socketLost(error: SocketLost): void {
    this.#openFailures = error.opened ? 0 : this.#openFailures + 1;
  }

  /** The long-poll got through: a socket that keeps failing to open is given up on. */
  pollReached(): void {
    this.reached();
    if (this.#openFailures >= OPEN_FAILURES_TO_GIVE_UP) {
      this.webSocket = false;
    }
  }

  /**
   * Milliseconds to sleep after failing to reach the service, never past the deadline;
   * `Unavailable` once it has been out of reach for `reconnectForMs`.
   */
  pause(): number {
    const lost = Date.now() - this.#lastReached;
    if (this.#reconnectForMs !== null && lost >= this.#reconnectForMs) {
      throw unavailable(fill(MESSAGES.lostWhileWaiting, { seconds: this.#reconnectForMs / 1000 }));
    }
    this.#failures += 1;
    const delay = backoff(this.#failures);
    const left = this.timeLeft();
    return left === null ? delay : Math.min(delay, left);
  }
}

function text(data: unknown): string {
  return typeof data === 'string' ? data : new TextDecoder().decode(data as ArrayBuffer);
}

/** The call state in a socket message; null for a message of another kind. */
export function callMessage(data: unknown): CallState | null {
  const message = JSON.parse(text(data)) as { type?: unknown; call?: unknown } | null;
  if (typeof message !== 'object' || message === null || message.type !== 'call') {
    return null;
  }
  const call = message.call;
  return typeof call === 'object' && call !== null ? (call as CallState) : null;
}

/**
 * The call's final state over one WebSocket; rejects with `SocketRefused`, `SocketLost`, an
 * error the service closed the socket with, or `signal`'s reason when it aborts.
 */
export function socketWait(
  Socket: WebSocketConstructor,
  url: string,
  headers: Record<string, string>,
  options: { openTimeoutMs: number; signal: AbortSignal; onOpen: () => void },
): Promise<CallState> {
  const { signal } = options;
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    let socket: SocketLike;
    try {
      socket = new Socket(url, { headers });
    } catch {
      reject(new SocketRefused()); // a browser's WebSocket, which takes no headers
      return;
    }
    let opened = false;
    let settled = false;
    const finish = (settle: () => void): void => {
      if (settled) {
        return;
      }
      settled = true;
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      settle();
      try {
        socket.close(1000);
      } catch {
        // closing a socket that never opened: nothing to do
      }
    };
    const onAbort = (): void => finish(() => reject(signal.reason));
    const timer = setTimeout(() => finish(() => reject(new SocketLost(false))), options.openTimeoutMs);
    signal.addEventListener('abort', onAbort, { once: true });
    socket.addEventListener('open', () => {
      opened = true;
      clearTimeout(timer);
      options.onOpen();
    });
    socket.addEventListener('message', (event: { data: unknown }) => {
      let state: CallState | null;
      try {
        state = callMessage(event.data);
      } catch {
        finish(() => reject(new SocketLost(opened)));
        return;
      }
      if (state !== null && isFinal(state)) {
        const final = state;
        finish(() => resolve(final));
      }
    });
    socket.addEventListener('close', (event: { code: number }) => {
      const known = CLOSE_ERRORS[event.code];
      if (known !== undefined) {
        const [Kind, message] = known;
        finish(() => reject(new Kind(message)));
      } else if (CLOSE_REFUSED.has(event.code)) {
        finish(() => reject(new SocketRefused()));
      } else {
        finish(() => reject(new SocketLost(opened)));
      }
    });
    socket.addEventListener('error', () => finish(() => reject(new SocketLost(opened))));
  });
}

/** Resolves after `ms`, or rejects with `signal`'s reason when it aborts first. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
