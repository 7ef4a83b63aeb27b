import json,glob,sys
pat=sys.argv[1]
for f in sorted(glob.glob(pat)):
    for l in open(f):
        r=json.loads(l)
        if 'counters' not in r: continue
        c=r['counters']; b=r['block']; g=r['grid']
        w=g[0]*g[1]*((b[0]*b[1]+31)//32)
        print(r['sizes'], f"{b[0]}x{b[1]}", "grid",g[:2], "t=%6.2fus"%(c['time_ms']*1000), "inst %5.0f gld %4.1f gst %4.1f sld %4.1f sst %4.1f bar %4.2f gsec/req %.2f/%.2f dramR %7d aw %.1f" % (c['inst_executed']/w, c['gld_requests']/w, c['gst_requests']/w, c['inst_shared_ld']/w, c['inst_shared_st']/w, c['inst_barrier']/w, c['gld_sectors']/max(1,c['gld_requests']), c['gst_sectors']/max(1,c['gst_requests']), c['dram_bytes_read'], c['achieved_active_warps']))
