// Stand-in for @openfn/compiler 1.3.0, whose package the npm registry here does
// not serve. engine-multi's worker thread (dist/worker/thread/run.js) imports
// exactly these two names: compile(expression, options) -> { code, map } and
// preloadAdaptorExports(path) (only for jobs with adaptors). The real compiler
// rewrites OpenFn job DSL into an ES module; jobs given to this example are
// already that module (`export default [fn, ...]`), so compiling is identity.
export default function compile(expression) {
  return { code: expression, map: undefined };
}

export async function preloadAdaptorExports(pathToAdaptor) {
  throw new Error(
    `compiler-shim: adaptors are not supported (asked to load ${pathToAdaptor}); send jobs in compiled form without adaptors`
  );
}
