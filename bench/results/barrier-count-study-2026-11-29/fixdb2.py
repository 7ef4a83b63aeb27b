import re,sys,glob
# set inst_barrier = k*warps for every sample of kernel name
db,name,k=sys.argv[1],sys.argv[2],float(sys.argv[3])
fs=glob.glob(f"{db}/v1/*/_Z*{name}*.toml"); assert len(fs)==1,fs
f=fs[0]; s=open(f).read(); parts=s.split('[[samples]]'); out=[parts[0]]; zeros=0
for p in parts[1:]:
    b=list(map(int,re.search(r'\nblock = \[(\d+), (\d+), (\d+)\]',p).groups()))
    g=list(map(int,re.search(r'\ngrid = \[(\d+), (\d+), (\d+)\]',p).groups()))
    w=g[0]*g[1]*g[2]*((b[0]*b[1]*b[2]+31)//32)
    m=re.search(r'\ninst_barrier = (\d+)',p)
    if m:
        if int(m.group(1))==0: zeros+=1
        p=p.replace(m.group(0),f"\ninst_barrier = {int(round(k*w))}")
    out.append(p)
open(f,'w').write('[[samples]]'.join(out)); print(f,len(parts)-1,"zeros before",zeros)
