import json,glob,sys,collections
for root,k in [("accuracy-idioms-h200-2026-11-29-batch4-sweep/exhaustive","transpose_t64"),("accuracy-idioms-h200-2026-11-29-batch4-sweep/exhaustive","transpose_nopad"),("accuracy-idioms-h200-2026-11-26-sweep/exhaustive","transpose_tiled")]:
    for f in sorted(glob.glob(f"{root}/{k}/x*/records/*.jsonl")):
        rows=[json.loads(l) for l in open(f)]
        rows=[r for r in rows if 'error' not in r]
        if not rows: continue
        best=min(r['counters']['time_ms'] for r in rows)
        print(k, rows[0]['sizes'], "regs",rows[0]['counters']['regs_per_thread'],"smem",rows[0]['counters']['smem_static'])
        for r in rows:
            c=r['counters']; b=r['block']; g=r['grid']
            nblk=g[0]*g[1]
            print(f"   {b[0]}x{b[1]}  t={c['time_ms']*1000:8.2f}us  ratio={best/c['time_ms']:.3f} blocks={nblk} GB/s={2*4*r['sizes'][0]*r['sizes'][1]/c['time_ms']/1e6:.0f}")
