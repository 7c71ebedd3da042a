# confined(p, r): p is r or below it, symlinks resolved (r empty: anything goes). Included by the others.
def confined(p,r):
 if not r:return True
 x=os.path.realpath(p);y=os.path.realpath(r)
 return x==y or x.startswith(y.rstrip('/')+'/')
