/**
 * `countersign-client/openai-agents` with the SDK's own scripted `Model`: the tool's
 * `needsApproval` asks Countersign, the run pauses on a held call, and the interruption is
 * approved or rejected from the decision a person makes at the web form; a serialised RunState
 * resumes in another process with the decision made meanwhile.
 */
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { promisify } from 'node:util';

import { Agent, run, tool } from '@openai/agents';
import { ScriptedModel, assistantMessage, functionCall } from '@openai/agents/testing';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';

import { needsApproval, resolveInterruptions } from '../src/openai-agents.js';
import { BIG_PAYMENT, SMALL_PAYMENT, clientFor, decide, newRunId, pendingCall, server } from './world.js';

function payer(runId: string, payment: object) {
  const client = clientFor();
  const paid: unknown[] = [];
  const pay = tool({
    name: 'pay',
    description: 'Pay an amount to a payee.',
    parameters: z.object({ amount: z.string(), payee: z.string() }),
    needsApproval: needsApproval(client, 'pay', { runId }),
    execute: async (args) => {
      paid.push(args);
      return `paid ${args.amount} to ${args.payee}`;
    },
  });
  const model = new ScriptedModel([
    [functionCall('pay', { ...payment }, { callId: `call-${runId}` })],
    [assistantMessage('Done.')],
  ]);
  const agent = new Agent({ name: 'payer', instructions: 'Pay the invoices.', model, tools: [pay] });
  return { agent, client, model, paid };
}

/** The text the model was given as the tool's output on its second call. */
function toolOutputSeen(model: ScriptedModel): string {
  const input = model.calls[1]?.request.input;
  const items = Array.isArray(input) ? input : [];
  const result = items.find((item) => item.type === 'function_call_result') as { output: unknown } | undefined;
  const output = result?.output as string | { text?: string } | undefined;
  return typeof output === 'string' ? output : (output?.text ?? '');
}

async function callsOfRun(runId: string): Promise<number> {
  const response = await fetch(`${server.url}/api/v1/calls?run_id=${encodeURIComponent(runId)}`, {
    headers: { Authorization: `Bearer ${server.token}` },
  });
  return ((await response.json()) as { count: number }).count;
}

describe('needsApproval and resolveInterruptions', () => {
  it('runs an allowed call in the same turn, without an interruption', async () => {
    const runId = newRunId();
    const { agent, paid } = payer(runId, SMALL_PAYMENT);
    const result = await run(agent, 'Pay bob.');
    expect(result.interruptions).toEqual([]);
    expect(paid).toEqual([SMALL_PAYMENT]);
  });

  it('pauses on a held call and runs it once a person approves', async () => {
    const runId = newRunId();
    const { agent, client, paid } = payer(runId, BIG_PAYMENT);
    const first = await run(agent, 'Pay bob.');
    expect(first.interruptions).toHaveLength(1);
    const resolving = resolveInterruptions(client, first.state, { runId });
    await decide((await pendingCall(runId)).id, { approve: true });
    const result = await run(agent, await resolving);
    expect(paid).toEqual([BIG_PAYMENT]);
    expect(result.finalOutput).toBe('Done.');
    expect(await callsOfRun(runId)).toBe(1);
  });

  it('rejects a denied call with the comment as what the model reads', async () => {
    const runId = newRunId();
    const { agent, client, model, paid } = payer(runId, BIG_PAYMENT);
    const first = await run(agent, 'Pay bob.');
    const resolving = resolveInterruptions(client, first.state, { runId });
    await decide((await pendingCall(runId)).id, { approve: false, comment: 'Bob was paid last week.' });
    await run(agent, await resolving);
    expect(paid).toEqual([]);
    expect(toolOutputSeen(model)).toContain('Bob was paid last week.');
  });

  it('rejects an approval of edited arguments, telling the model them', async () => {
    const runId = newRunId();
    const { agent, client, model, paid } = payer(runId, BIG_PAYMENT);
    const first = await run(agent, 'Pay bob.');
    const resolving = resolveInterruptions(client, first.state, { runId });
    const edited = '{"amount": "450.00", "payee": "bob"}';
    await decide((await pendingCall(runId)).id, { approve: true, edited });
    await run(agent, await resolving);
    expect(paid).toEqual([]);
    expect(toolOutputSeen(model)).toContain(edited);
  });

  it('cancels the held call at the deadline and rejects it', async () => {
    const runId = newRunId();
    const { agent, client, model, paid } = payer(runId, BIG_PAYMENT);
    const first = await run(agent, 'Pay bob.');
    await run(agent, await resolveInterruptions(client, first.state, { runId, deadlineMs: 1000 }));
    expect(paid).toEqual([]);
    expect(toolOutputSeen(model)).toContain('cancelled the call');
  });

  it('resumes a RunState in a new process with the decision made while none ran', async () => {
    const runId = newRunId();
    const payerScript = resolve(import.meta.dirname, 'fixtures', 'payer.mjs');
    const env = { ...process.env, COUNTERSIGN_URL: server.url, COUNTERSIGN_TOKEN: server.token, RUN_ID: runId };
    const node = promisify(execFile);
    const started = await node(process.execPath, [payerScript, 'start', JSON.stringify(BIG_PAYMENT)], { env });
    const { interruptions, state } = JSON.parse(started.stdout) as { interruptions: number; state: string };
    expect(interruptions).toBe(1);

    await decide((await pendingCall(runId)).id, { approve: true, comment: 'Approved overnight.' });

    const resuming = node(process.execPath, [payerScript, 'resume'], { env });
    resuming.child.stdin?.end(state);
    const resumed = JSON.parse((await resuming).stdout) as { paid: unknown[]; output: string };
    expect(resumed.paid).toEqual([BIG_PAYMENT]);
    expect(resumed.output).toBe('Paid.');
    expect(await callsOfRun(runId)).toBe(1);
  });
});
