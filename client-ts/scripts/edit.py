# edit: replace a string in a file; argv[1] is the JSON payload or the path of its staged copy.
import json,os,stat,sys
a=sys.argv[1]
if a.startswith('/'):
 try:
  with open(a,'rb') as f:d=f.read()
 finally:
  try:os.remove(a)
  except OSError:pass
else:d=a
q=json.loads(d);p=q['p'];o=q['o'];w=q['n']
#: include confined.py
def out(**k):print(json.dumps(k));sys.exit(0)
def crlf(s):return s.replace('\r\n','\n').replace('\n','\r\n')
def lf(s):return s.replace('\r\n','\n')
try:
 if not confined(p,q['r']):out(error='invalid_path')
 if not stat.S_ISREG(os.stat(p).st_mode):out(error='not_a_file')
 with open(p,'rb') as f:raw=f.read()
 try:t=raw.decode('utf-8')
 except UnicodeDecodeError:out(error='not_a_text_file')
 for x,y in ((o,w),(crlf(o),crlf(w)),(lf(o),lf(w))):
  c=t.count(x)
  if c:break
 else:out(error='string_not_found')
 if c>1 and not q['a']:out(error='multiple_occurrences',count=c)
 t=t.replace(x,y) if q['a'] else t.replace(x,y,1)
 with open(p,'wb') as f:f.write(t.encode('utf-8'))
 out(count=c)
except FileNotFoundError:out(error='file_not_found')
except NotADirectoryError:out(error='file_not_found')
except PermissionError:out(error='permission_denied')
except OSError as e:out(error='os_error',detail=str(e)[:200])
