/**
 * The OpenAI Agents SDK for JavaScript (`@openai/agents`): Countersign decides each function
 * tool call, through the SDK's own approvals.
 *
 * - `needsApproval(client, 'pay')` is a tool's `needsApproval`: the call is submitted at once;
 *   allowed, it runs in the same turn; anything else pauses the run with an interruption.
 * - `resolveInterruptions(client, state)` waits for Countersign's decision on each interruption
 *   and approves or rejects it on the run's state (a rejection's message is what the model
 *   reads: the reviewer's comment, the policy's reasons); resume with `run(agent, state)`.
 *
 * Both reach the same Countersign call through an Idempotency-Key made from the run id and the
 * model's call id, with the arguments as canonical JSON: a `RunState` serialised, its process
 * gone, and restored elsewhere resolves to the decision made meanwhile, never to a second call.
 * The SDK runs a call only with the model's own arguments, so an approval of edited arguments
 * is a rejection that tells the model them.
 */
import type { RunContext, RunState, RunToolApprovalItem, protocol } from '@openai/agents';

import type { Client } from './client.js';
import { CountersignError, NotApproved, fill } from './errors.js';
import { type CallState, type SubmitCall, editedArguments, isGo } from './protocol.js';

export interface ApprovalOptions {
  principal?: string;
  /** The run's id in Countersign (budgets), and part of each call's Idempotency-Key. */
  runId?: string;
  /** What the approver reads as the reason for the call. */
  context?: string;
}

export interface ResolveOptions extends ApprovalOptions {
  /** The longest wait for a decision; past it the call is cancelled and rejected. */
  deadlineMs?: number;
  signal?: AbortSignal;
}

export const NOT_APPROVED = 'Countersign: {message}';
export const FAILED = 'Countersign could not decide this call ({kind}), so the tool did not run.';
export const EDIT_NOT_APPLIED =
  'Countersign: the approver approved this call only with changed arguments, so it did not run as asked. Call the tool again with exactly these arguments if they still serve: {arguments}';
const KEY_PREFIX = 'openai-agents:';

type FunctionCallItem = protocol.FunctionCallItem;

function sortedKeys(value: unknown): unknown {
  if (Array.isArray(value)) {
    return value.map(sortedKeys);
  }
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return Object.fromEntries(entries.map(([key, item]) => [key, sortedKeys(item)]));
  }
  return value;
}

/**
 * The arguments as the same text on both sides of a pause: `needsApproval` is given them
 * parsed, an interruption has the model's text, so each is written with its keys sorted.
 */
export function canonicalArguments(input: unknown): string {
  return JSON.stringify(sortedKeys(input ?? {}));
}

async function idempotencyKey(tool: string, callId: string, runId: string | undefined): Promise<string> {
  // Bounded and unambiguous whatever the ids hold: the service keeps keys of 200 characters.
  const text = JSON.stringify([runId ?? '', tool, callId]);
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text));
  const hex = [...new Uint8Array(digest)].map((byte) => byte.toString(16).padStart(2, '0')).join('');
  return KEY_PREFIX + hex;
}

async function submission(
  tool: string,
  argumentsText: string,
  callId: string,
  options: ApprovalOptions,
): Promise<SubmitCall> {
  return {
    tool,
    arguments: argumentsText,
    idempotencyKey: await idempotencyKey(tool, callId, options.runId),
    ...(options.principal !== undefined && { principal: options.principal }),
    ...(options.runId !== undefined && { runId: options.runId }),
    ...(options.context !== undefined && { context: options.context }),
  };
}

/**
 * A tool's `needsApproval` backed by Countersign: false (run now) only when the call is
 * allowed; otherwise true, and `resolveInterruptions` brings the decision. An error reaching
 * Countersign pauses the run too: fail closed. `tool` is the tool's name as the model calls it.
 */
export function needsApproval(
  client: Client,
  tool: string,
  options: ApprovalOptions = {},
): (context: RunContext, input: unknown, callId?: string) => Promise<boolean> {
  return async (_context, input, callId) => {
    if (callId === undefined) {
      return true;
    }
    try {
      const state = await client.submit(await submission(tool, canonicalArguments(input), callId, options));
      return !isGo(state);
    } catch {
      return true;
    }
  };
}

function modelArguments(item: RunToolApprovalItem): string {
  const text = item.arguments ?? '';
  try {
    return canonicalArguments(text === '' ? {} : JSON.parse(text));
  } catch {
    return text; // not JSON: the service refuses it, and says why
  }
}

/** Null to approve the paused call, else the message to reject it with. */
async function verdict(client: Client, item: RunToolApprovalItem, options: ResolveOptions): Promise<string | null> {
  const raw = item.rawItem as FunctionCallItem;
  let final: CallState;
  try {
    final = await client.call(await submission(raw.name, modelArguments(item), raw.callId, options), {
      ...(options.deadlineMs !== undefined && { timeoutMs: options.deadlineMs }),
      ...(options.signal && { signal: options.signal }),
    });
  } catch (error) {
    if (options.signal?.aborted) {
      throw error;
    }
    if (error instanceof CountersignError) {
      return fill(NOT_APPROVED, { message: error.message });
    }
    return fill(FAILED, { kind: error instanceof Error ? error.name : 'Error' });
  }
  if (!isGo(final)) {
    return fill(NOT_APPROVED, { message: new NotApproved(final).message });
  }
  try {
    if (editedArguments(final) !== null) {
      return fill(EDIT_NOT_APPLIED, { arguments: final.arguments ?? '' });
    }
  } catch (error) {
    return fill(NOT_APPROVED, { message: (error as Error).message });
  }
  return null;
}

/**
 * The run's state with each of its function-tool interruptions decided by Countersign: all are
 * waited for together; each allowed or approved one is approved, every other rejected with
 * the reason as the message the model gets. Resume with `run(agent, state)`. Other
 * interruptions (shell, computer, hosted tools) are left to the caller. Aborting `signal`
 * cancels the calls still waiting and rejects; the state is left undecided.
 */
export async function resolveInterruptions<S extends RunState<any, any>>(
  client: Client,
  state: S,
  options: ResolveOptions = {},
): Promise<S> {
  const items = state.getInterruptions().filter((item) => item.rawItem.type === 'function_call');
  const verdicts = await Promise.all(items.map((item) => verdict(client, item, options)));
  items.forEach((item, index) => {
    const rejection = verdicts[index] ?? null;
    if (rejection === null) {
      state.approve(item);
    } else {
      state.reject(item, { message: rejection });
    }
  });
  return state;
}
