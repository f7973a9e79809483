/**
 * An OpenAI Agents SDK agent whose payment tool needs Countersign's approval.
 *
 * The tool's `needsApproval` asks Countersign: an allowed call runs at once, a held one pauses
 * the run with an interruption. `resolveInterruptions` waits for the person's decision and
 * approves or rejects the paused call on the run's state (a rejection's message is what the
 * model reads), and the run resumes. The state can be kept (`result.state.toString()`) and
 * resumed in another process after a restart. The model here is the SDK's own
 * `ScriptedModel`, so no API key or network is needed.
 *
 *     COUNTERSIGN_URL=http://127.0.0.1:8000 COUNTERSIGN_TOKEN=cs_… node openai-agents.ts
 */
import { Agent, run, tool } from '@openai/agents';
import { ScriptedModel, assistantMessage, functionCall } from '@openai/agents/testing';
import { Client } from 'countersign-client';
import { needsApproval, resolveInterruptions } from 'countersign-client/openai-agents';
import { z } from 'zod';

const client = new Client(); // COUNTERSIGN_URL and COUNTERSIGN_TOKEN from the environment
// A run of its own: the run id is part of each call's Idempotency-Key.
const runId = `invoice-0042-${Date.now()}`;

const pay = tool({
  name: 'pay',
  description: 'Pay an amount to a payee.',
  parameters: z.object({ amount: z.string(), currency: z.string(), payee: z.string() }),
  needsApproval: needsApproval(client, 'pay', { runId }),
  execute: async ({ amount, currency, payee }) => `paid ${currency} ${amount} to ${payee}`,
});

// Stands in for a real model: one payment, then a summary.
const model = new ScriptedModel([
  [functionCall('pay', { amount: '1250.00', currency: 'USD', payee: 'bob' }, { callId: 'call-1' })],
  [assistantMessage('Invoice INV-0042 is dealt with.')],
]);
const agent = new Agent({ name: 'payer', instructions: 'Pay the invoices.', model, tools: [pay] });

let result = await run(agent, 'Pay invoice INV-0042: USD 1250.00 to bob.');
while (result.interruptions.length > 0) {
  // To survive a restart, keep result.state.toString() and resume later with
  // RunState.fromString(agent, text): the decision made meanwhile is not lost.
  const state = await resolveInterruptions(client, result.state, { runId, deadlineMs: 120_000 });
  result = await run(agent, state);
}
for (const item of result.newItems) {
  if (item.type === 'tool_call_output_item') {
    console.log('done:', item.output); // the tool's output, or why it did not run
  }
}
console.log(result.finalOutput);
