"""The DRAM queueing exponent q of the model (klaraptor-model, "DRAM under load") from the
output of loaded.cu: for each q, the bandwidth each launch reached against the one
B u / (1 + u^q)^(1/q) predicts, u = the demand its warps place at the unloaded latency L0
(the calibration's mem_latency_cycles) over the calibrated bandwidth B; prints the
root-mean-square log error per q and the ratios at 8, 32 and 64 warps per SM.

    python3 fit.py <loaded output> <L0 cycles> <B GB/s> <SM clock GHz> <SMs>

Bytes a warp moves per latency period: 128 (sum: one load), 256 (copy: a load and its
store), 384 (saxpy: two loads and a store). The 12-warp rows repeat the 8-warp launch
(blocks of at most 8 warps, one per SM) and are left out.
"""
import sys,math
rows=[l.split('\t') for l in open(sys.argv[1]) if l[0] not in '#k']
L0=float(sys.argv[2]); B=float(sys.argv[3]); f=float(sys.argv[4]); sms=int(sys.argv[5])
per={'sum':128,'copy':256,'saxpy':384}
data=[(r[0],int(r[1]),float(r[5])) for r in rows if int(r[1])!=12]
def pred(k,kern,w):
    D=w*sms*per[kern]/(L0/f)  # bytes per ns... L0 cycles / f GHz = ns
    u=D/B
    return B*u/(1+u**k)**(1/k)
for k in [1,1.5,2,2.5,3,4,6,100]:
    err=[math.log(pred(k,c,w)/x) for c,w,x in data]
    rms=math.sqrt(sum(e*e for e in err)/len(err))
    print(k, 'rms log err %.3f'%rms, ' '.join('%s%d:%.2f'%(c[0],w,math.exp(e)) for (c,w,x),e in zip(data,err) if w in (8,32,64)))
