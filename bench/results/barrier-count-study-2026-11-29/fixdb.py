import re,sys,glob
# usage: fixdb.py DB kernelname tile mode ; mode 'const4' sets inst_barrier = 4*warps, 'one' = 1*warps
db,name,T,mode=sys.argv[1],sys.argv[2],int(sys.argv[3]),sys.argv[4]
fs=glob.glob(f"{db}/v1/*/_Z*{name}*.toml")
assert len(fs)==1,fs
f=fs[0]; s=open(f).read()
parts=s.split('[[samples]]')
out=[parts[0]]; bad=0
for p in parts[1:]:
    b=list(map(int,re.search(r'\nblock = \[(\d+), (\d+), (\d+)\]',p).groups()))
    g=list(map(int,re.search(r'\ngrid = \[(\d+), (\d+), (\d+)\]',p).groups()))
    w=g[0]*g[1]*g[2]*((b[0]*b[1]*b[2]+31)//32)
    m=re.search(r'\ninst_barrier = (\d+)',p)
    if m:
        v=int(m.group(1)); trips=T//b[1]
        if v!=(2*trips+4)*w: bad+=1; print("not 2*trips+4:",b,g,v/w)
        new={'const4':4*w,'one':w}[mode]
        p=p.replace(m.group(0),f"\ninst_barrier = {new}")
    out.append(p)
open(f,'w').write('[[samples]]'.join(out)); print(f, "samples",len(parts)-1,"mismatch",bad)
