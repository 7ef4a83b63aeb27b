import tomllib,glob,sys
for f in sorted(glob.glob(sys.argv[1]+"/v1/*/*.toml")):
    d=tomllib.load(open(f,'rb'))
    S=d['samples']
    if not any(s['counters'].get('inst_barrier',0)>0 for s in S): continue
    big=max(S,key=lambda s: eval('*'.join(map(str,s['sizes']))))['sizes']
    out=[]
    for s in S:
        if s['sizes']!=big: continue
        c=s['counters'];b=s['block'];g=s['grid']
        w=g[0]*g[1]*g[2]*((b[0]*b[1]*b[2]+31)//32)
        out.append("%sx%sx%s:%.1f/%.0f"%(b[0],b[1],b[2],c['inst_barrier']/w,c['inst_executed']/w))
    print(d['kernel']['name'],big,' '.join(out))
