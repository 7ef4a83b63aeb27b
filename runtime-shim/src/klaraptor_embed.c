/* klaraptor runtime, as every object klaraptor-cc instruments carries it.
 *
 * build.rs partially links klaraptor_rt.c, klaraptor_prof.c and this file into one object
 * (`klaraptor_rt_embedded.o`), compiled with -fvisibility=hidden, then makes every symbol it
 * defines weak and gives the launch entry point of the profiling runtime its own name:
 *
 *   __wrap___cudaLaunchKernel -> klaraptor__launch_kernel   (defined here, weak)
 *   __real___cudaLaunchKernel -> __cudaLaunchKernel         (the CUDA runtime's)
 *
 * klaraptor-cc renames the instrumented host object's calls of __cudaLaunchKernel to
 * klaraptor__launch_kernel and partially links the result with this object (compile.rs).
 * So any number of instrumented objects link together with any linker: the first copy the
 * linker sees defines every runtime symbol, the others' weak definitions are ignored, and
 * a shared library keeps a copy of its own (hidden: not exported). The profiling runtime is
 * there in every binary, inactive unless KLARAPTOR_PROFILE_PLAN and KLARAPTOR_PROFILE_OUT
 * are set (klaraptor_prof.c), which is what `klaraptor profile <binary>` does.
 *
 * Nothing here runs in every copy except the constructor of klaraptor_prof.c, which hands
 * over to the one copy the linker kept (klaraptor__prof_init is a weak global). */

/* What the driver looks for to know that an object or archive carries the runtime
 * (driver/src/runtime.rs: EMBEDDED_MARKER). */
__attribute__((section(".klaraptor_rt"), used, aligned(1)))
static const char klaraptor_embedded_marker[] = "KLARAPTOR-RT-EMBEDDED v1";
