// The jobs the Lightning stand-in hands out, in compiled form: each is the ES
// module the real @openfn/compiler would produce (`export default [fn, ...]`,
// no adaptors), so the shim compiler passes it through unchanged and the real
// runtime executes it in a worker thread of an engine child process.
//
// Each entry builds the job source from its parameters (all numbers).

const num = (v, def) => (Number.isFinite(Number(v)) && v !== '' && v !== undefined ? Number(v) : def);

export const jobs = {
  // Finishes at once: reason success.
  ok: () => 'export default [(state) => { state.data.ok = true; return state; }]',

  // Holds `mb` MiB of touched memory in the run's thread for `ms`: a run whose
  // memory is steady long enough to compare with /proc.
  hold: ({ mb = 30, ms = 30000 }) => `export default [(state) => new Promise((resolve) => {
  const b = Buffer.alloc(${num(mb, 30)} * 1024 * 1024, 1);
  setTimeout(() => { state.data.held = b.length; resolve(state); }, ${num(ms, 30000)});
})]`,

  // Sleeps `ms`: with ms above the run's run_timeout_ms the engine kills it
  // (TimeoutError, reason kill) and forks a new child.
  sleep: ({ ms = 1000 }) =>
    `export default [(state) => new Promise((resolve) => setTimeout(() => resolve(state), ${num(ms, 1000)}))]`,

  // Allocates until the thread's heap limit (run_memory_limit_mb, else
  // WORKER_MAX_RUN_MEMORY_MB): the engine reports OOMError (reason kill) and
  // keeps the child process.
  oom: () => `export default [(state) => {
  const hog = [];
  for (;;) hog.push(new Array(100000).fill(Math.random()));
}]`,

  // Throws: the runtime records the error in state.errors, reason fail.
  throw: () => 'export default [(state) => { throw new Error("job threw on purpose"); }]',

  // Returns a final state carrying `mb` MiB of text: the worker's main process
  // receives it over IPC (a large dataclip, kit #897).
  bigstate: ({ mb = 8 }) =>
    `export default [(state) => { state.data.blob = "x".repeat(${num(mb, 8)} * 1024 * 1024); return state; }]`,
};

export function jobSource(kind, params = {}) {
  const make = jobs[kind];
  if (!make) {
    throw new Error(`unknown job ${JSON.stringify(kind)}; one of ${Object.keys(jobs).join(', ')}`);
  }
  return make(params);
}
