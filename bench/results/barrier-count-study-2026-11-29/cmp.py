import json,sys,math,tomllib,os
sp=tomllib.load(open('/work/main/bench/accuracy/split.toml','rb'))
half={}
for suite in ('polybench','idioms'):
    for h in ('tuning','test'):
        for p in sp[suite][h]: half[p]=h
names=sys.argv[1:]
files=['id4','idtune','idtest','pbtune','pbtest']
def load(v,f):
    p=f'/tmp/inv38/var/{v}/{f}.json'
    return json.load(open(p))['kernels'] if os.path.exists(p) else None
for f in files:
    ks=[load(v,f) for v in names]
    if ks[0] is None: continue
    for h in ('tuning','test'):
        agg=[[0,0] for _ in names]
        for k in ks[0]:
            if half.get(k.split()[0])!=h: continue
            for i,K in enumerate(ks):
                if K is None or k not in K: continue
                g,_,n=K[k]; agg[i][0]+=n*math.log(g); agg[i][1]+=n
        if agg[0][1]==0: continue
        print(f"{f:7s} {h:6s} n={agg[0][1]:3d} "+"  ".join(f"{v}={math.exp(a/c):.3f}" for v,(a,c) in zip(names,agg) if c))
    for k in ks[0]:
        vals=[K[k][0] if K and k in K else float('nan') for K in ks]
        if max(vals)-min(vals)>0.0015:
            print("    ",k.rsplit(' ',1)[0], half.get(k.split()[0]), " ".join(f"{x:.3f}" for x in vals))
