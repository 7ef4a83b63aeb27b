/* The CUPTI headers the collector binds: results, version, chip name, profiler
 * initialisation and counter availability (target), the profiler host API and the
 * range profiler. Parsed as C; cupti_profiler_host.h includes <string>, which the
 * empty `string` beside this file satisfies. */
#include <cupti_result.h>
#include <cupti_version.h>
#include <cupti_target.h>
#include <cupti_profiler_target.h>
#include <cupti_profiler_host.h>
#include <cupti_range_profiler.h>
