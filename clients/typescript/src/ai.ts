/**
 * The Vercel AI SDK (`ai`): Countersign decides each tool call the model makes.
 *
 * - `gateTools(client, tools)` wraps each tool's `execute`: the call is submitted and waited
 *   for, and the real `execute` runs only when it is allowed or approved, with the approver's
 *   edited arguments when edited. Otherwise the model receives the tool result
 *   `{ not_approved: true, status, reason }` and `execute` never runs.
 * - `countersignApproval(client)` is a `toolApproval` for `generateText`, `streamText` and
 *   `ToolLoopAgent`: the decision becomes the SDK's own automatic approval or denial, so a UI
 *   built on the SDK's approval parts shows it. The SDK runs a tool only with the model's own
 *   arguments, so an approval of edited arguments becomes a denial that tells the model them.
 */
import { type Tool, type ToolExecutionOptions, type ToolSet, asSchema } from 'ai';

import type { Client } from './client.js';
import { CountersignError, NotApproved, fill } from './errors.js';
import { type CallState, type SubmitCall, editedArguments, isGo } from './protocol.js';

export interface GateToolsOptions {
  /** The longest wait for a decision; past it the call is cancelled and the tool does not run. */
  deadlineMs?: number;
  principal?: string;
  runId?: string;
  /** What the approver reads as the reason for the call: text, or made from the call. */
  context?: string | ((tool: string, input: unknown) => string);
}

export interface ApprovalOptions extends GateToolsOptions {
  /** The tools to ask Countersign about (default: every tool); the others need no approval. */
  tools?: readonly string[];
}

/** What the model receives instead of the tool's result when the call may not run. */
export interface NotApprovedResult {
  not_approved: true;
  status: string;
  reason: string;
}

export const EDIT_DOES_NOT_FIT =
  'The approver approved this call with edited arguments that the tool\'s input schema does not accept, so the tool did not run.';
export const EDIT_NOT_APPLIED =
  'Countersign: the approver approved this call only with changed arguments, so it did not run as asked. Call the tool again with exactly these arguments if they still serve: {arguments}';

function submission(tool: string, input: unknown, options: GateToolsOptions): SubmitCall {
  const context = typeof options.context === 'function' ? options.context(tool, input) : options.context;
  return {
    tool,
    arguments: JSON.stringify(input ?? {}),
    ...(options.principal !== undefined && { principal: options.principal }),
    ...(options.runId !== undefined && { runId: options.runId }),
    ...(context !== undefined && { context }),
  };
}

async function decision(
  client: Client,
  tool: string,
  input: unknown,
  options: GateToolsOptions,
  signal?: AbortSignal,
): Promise<CallState | NotApprovedResult> {
  try {
    return await client.call(submission(tool, input, options), {
      ...(options.deadlineMs !== undefined && { timeoutMs: options.deadlineMs }),
      ...(signal && { signal }),
    });
  } catch (error) {
    if (signal?.aborted) {
      throw error; // the run itself was aborted: the SDK reports that
    }
    if (error instanceof NotApproved) {
      return { not_approved: true, status: error.status, reason: error.reason };
    }
    const reason = error instanceof CountersignError ? error.message : 'Countersign could not decide this call, so the tool did not run.';
    return { not_approved: true, status: 'error', reason };
  }
}

function notApproved(state: CallState): NotApprovedResult {
  return { not_approved: true, status: state.status, reason: new NotApproved(state).reason };
}

async function lastValue(result: unknown): Promise<unknown> {
  // A streaming tool yields preliminary results; the gated tool hands over the last, its result.
  const value = await result;
  if (typeof value === 'object' && value !== null && Symbol.asyncIterator in value) {
    let last: unknown;
    for await (const item of value as AsyncIterable<unknown>) {
      last = item;
    }
    return last;
  }
  return value;
}

/** The approver's edit, checked by the tool's own input schema; null when it does not fit. */
async function editedInput(tool: Tool, edited: Record<string, unknown>): Promise<{ value: unknown } | null> {
  const validate = asSchema(tool.inputSchema).validate;
  if (validate === undefined) {
    return { value: edited };
  }
  const result = await validate(edited);
  return result.success ? { value: result.value } : null;
}

function isNotApproved(output: unknown): output is NotApprovedResult {
  return typeof output === 'object' && output !== null && (output as { not_approved?: unknown }).not_approved === true;
}

function gateTool(client: Client, name: string, tool: Tool, options: GateToolsOptions): Tool {
  const execute = tool.execute as (input: unknown, execution: ToolExecutionOptions<unknown>) => unknown;
  const toModelOutput = tool.toModelOutput;
  return {
    ...tool,
    // The tool's own conversion expects its own results: the reason goes to the model as is.
    ...(toModelOutput !== undefined && {
      toModelOutput: (part: Parameters<typeof toModelOutput>[0]) =>
        isNotApproved(part.output) ? { type: 'json' as const, value: { ...part.output } } : toModelOutput(part),
    }),
    execute: async (input: unknown, execution: ToolExecutionOptions<unknown>) => {
      const final = await decision(client, name, input, options, execution.abortSignal);
      if ('not_approved' in final) {
        return final;
      }
      if (!isGo(final)) {
        return notApproved(final);
      }
      let edited: Record<string, unknown> | null;
      try {
        edited = editedArguments(final);
      } catch (error) {
        return { not_approved: true, status: final.status, reason: (error as Error).message };
      }
      if (edited === null) {
        return lastValue(execute(input, execution));
      }
      const fitting = await editedInput(tool, edited);
      if (fitting === null) {
        return { not_approved: true, status: final.status, reason: EDIT_DOES_NOT_FIT };
      }
      return lastValue(execute(fitting.value, execution));
    },
  } as Tool;
}

/**
 * The same tool set, where each tool with an `execute` runs only if Countersign allows the call
 * or a person approves it (provider-executed tools run at the provider and are left as they are).
 */
export function gateTools<TOOLS extends ToolSet>(client: Client, tools: TOOLS, options: GateToolsOptions = {}): TOOLS {
  const gated: Record<string, Tool> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const runsHere = tool.execute !== undefined && tool.isProviderExecuted !== true;
    gated[name] = runsHere ? gateTool(client, name, tool, options) : tool;
  }
  return gated as TOOLS;
}

/** An automatic approval or denial in the AI SDK's terms. */
export type ApprovalVerdict = { type: 'approved'; reason?: string } | { type: 'denied'; reason: string } | undefined;

/**
 * A `toolApproval` function: each tool call is submitted to Countersign and waited for; allowed
 * or approved, it is the SDK's automatic approval (the tool runs), anything else its automatic
 * denial with the reason as what the model reads.
 */
export function countersignApproval(
  client: Client,
  options: ApprovalOptions = {},
): (approval: { toolCall: { toolName: string; input: unknown } }) => Promise<ApprovalVerdict> {
  return async ({ toolCall }) => {
    if (options.tools !== undefined && !options.tools.includes(toolCall.toolName)) {
      return undefined;
    }
    const final = await decision(client, toolCall.toolName, toolCall.input, options);
    if ('not_approved' in final) {
      return { type: 'denied', reason: final.reason };
    }
    if (!isGo(final)) {
      return { type: 'denied', reason: notApproved(final).reason };
    }
    if (final.edited) {
      return { type: 'denied', reason: fill(EDIT_NOT_APPLIED, { arguments: final.arguments ?? '' }) };
    }
    const comment = final.decision?.comment;
    return comment ? { type: 'approved', reason: comment } : { type: 'approved' };
  };
}
